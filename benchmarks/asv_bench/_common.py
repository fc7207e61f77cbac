"""Helpers shared by the asv suite: skips, data, synchronisation, bandwidth and the float64 oracle.

Nothing in this module is a benchmark (asv collects only names that start with
``time_``, ``track_``, ``peakmem_``...), and nothing here imports CuPy, numba,
JAX or torch at import time: asv imports every module of the suite on every
machine, and the GPU libraries are loaded inside ``setup`` where they are used.

Skipping follows asv's convention (scipy's and scikit-image's suites do the
same): ``setup`` raises :class:`NotImplementedError` for a parameter
combination this machine cannot run, and asv records it as skipped (``n/a``)
instead of failed. The suite asks :func:`scanarray.available_backends` what
exists, so it runs unchanged on commits where a backend has not landed yet.
"""

from __future__ import annotations

import os
import time

import numpy as np

#: ``SCANARRAY_ASV_FULL=1`` runs the full sweep (issue sizes); the default is small.
FULL = os.environ.get("SCANARRAY_ASV_FULL", "") not in ("", "0")

#: units asv shows next to ``track_`` values
GBPS = "GB/s"
RELERR = "relative error"
BYTES = "bytes"

# asv settings for every class: a few samples are enough for a memory-bound
# scan, and keep a CPU run over several commits (and the GPU budget) short.
TIMING = dict(repeat=(2, 7, 4.0), warmup_time=0.0, min_run_count=2, timeout=300)


#: ``SCANARRAY_ASV_SMOKE=1``: tiny sizes for CI's smoke run (results not kept).
SMOKE = os.environ.get("SCANARRAY_ASV_SMOKE", "") not in ("", "0")


def pick(small, full, smoke=None):
    """``full`` under ``SCANARRAY_ASV_FULL=1``, ``smoke`` under ``SCANARRAY_ASV_SMOKE=1``, else ``small``."""
    if FULL:
        return full
    if SMOKE and smoke is not None:
        return smoke
    return small


# --------------------------------------------------------------------- skips
def backend_info():
    """``scanarray.available_backends()``, or a skip on commits that predate it."""
    try:
        import scanarray

        return scanarray.available_backends()
    except (ImportError, AttributeError) as exc:
        raise NotImplementedError(f"scanarray has no available_backends here: {exc}") from exc


def require(backend, method="auto", dense=False):
    """Raise NotImplementedError unless ``backend`` runs here and offers ``method``."""
    info = backend_info().get(backend)
    if info is None:
        raise NotImplementedError(f"backend {backend!r} is not registered in this commit")
    if not info["available"]:
        raise NotImplementedError(f"backend {backend!r}: {info['reason']}")
    methods = info["dense_methods"] if dense else info["methods"]
    if method != "auto" and method not in methods:
        raise NotImplementedError(f"backend {backend!r} has no method {method!r} (has {methods})")
    return info


def require_gpu():
    """Import and return CuPy, or skip: no CuPy or no CUDA device on this machine."""
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() < 1:
            raise NotImplementedError("no CUDA device")
    except NotImplementedError:
        raise
    except Exception as exc:  # ImportError, CUDARuntimeError without a driver
        raise NotImplementedError(f"no usable CuPy/CUDA here: {exc}") from exc
    return cupy


def require_module(name):
    """Import a peer library or skip."""
    import importlib

    try:
        return importlib.import_module(name)
    except Exception as exc:  # ImportError, or a broken CUDA build of the peer
        raise NotImplementedError(f"{name} is not importable here: {exc}") from exc


def warm(fn, what):
    """Run ``fn`` once (compiles kernels, fills caches); unsupported problems become skips."""
    try:
        return fn()
    except (NotImplementedError, ValueError) as exc:
        raise NotImplementedError(f"{what}: {type(exc).__name__}: {exc}") from exc


def gpu_sync():
    """Wait for CuPy's current stream: every timed GPU call ends with this."""
    import cupy

    cupy.cuda.get_current_stream().synchronize()


def gpu_name():
    import cupy

    return cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["name"].decode()


# ---------------------------------------------------------------------- data
def parse_shape(label):
    """``"64x65536"`` -> ((64, 65536), -1); ``"16384x256@0"`` -> ((16384, 256), 0)."""
    axis = -1
    if "@" in label:
        label, ax = label.split("@")
        axis = int(ax)
    return tuple(int(s) for s in label.split("x")), axis


def _xp(device):
    if device == "gpu":
        return require_gpu()
    return np


def diagonal_data(shape, dtype, a_kind="full", seed=0, resets=0.0, a_range=(0.5, 0.999), device="cpu",
                  a_shape=None):
    """Inputs ``(a, b)``: contractive ``a`` (or a Python scalar), normal ``b``.

    Drawn where they will be used (NumPy, or CuPy for ``device="gpu"``, so a
    GPU workload of 2**28 elements does not wait on the host's generator).
    ``resets`` is the fraction of exact zeros in ``a`` (episode ends in GAE);
    ``a_shape`` draws a smaller ``a`` that broadcasts against ``b`` (a decay
    shared by lanes, as in chunked linear RNNs).
    """
    xp = _xp(device)
    rng = xp.random.default_rng(seed)
    dtype = np.dtype(dtype)
    real = np.float32 if dtype in (np.float16, np.float32, np.complex64) else np.float64
    if device == "gpu":
        # Draw in float64 and cast: the first H200 run (2026-11-21) returned a relative error of
        # exactly 0.0 for every GAE implementation, which float32 results can only show on
        # degenerate data (a == 0 everywhere gives h == b), so the float32 draws are not trusted.
        real = np.float64
    b = rng.standard_normal(shape, dtype=real).astype(dtype)
    if a_kind == "scalar":
        return 0.9, b
    lo, hi = a_range
    ashape = shape if a_shape is None else a_shape
    a = (rng.random(ashape, dtype=real) * (hi - lo) + lo).astype(dtype)
    if resets:
        a[rng.random(ashape, dtype=real) < resets] = 0
    return a, b


def dense_data(batch, T, n, dtype, seed=0, device="cpu"):
    """Inputs ``(A, b)`` of shapes (batch, T, n, n) and (batch, T, n), spectral radius about 0.5.

    Entries N(0, (0.5/sqrt(n))^2): by the circular law the spectrum fills a disc
    of radius about 0.5, so products of the A[t] decay (a contractive system).
    """
    xp = _xp(device)
    rng = xp.random.default_rng(seed)
    real = np.float32 if np.dtype(dtype) in (np.float32, np.complex64) else np.float64
    A = (rng.standard_normal((batch, T, n, n), dtype=real) * (0.5 / np.sqrt(n))).astype(dtype)
    b = rng.standard_normal((batch, T, n), dtype=real).astype(dtype)
    return A, b


def nbytes_moved(a, b, h):
    """Bytes a memory-bound scan must move: ``a`` and ``b`` read once, ``h`` written once.

    A Python-scalar or broadcast ``a`` counts its stored bytes only.
    """
    a_bytes = 0
    if not np.isscalar(a) and a is not None:
        a_bytes = int(np.prod([s for s, st in zip(a.shape, a.strides) if st != 0], dtype=np.int64)) * a.dtype.itemsize
    return a_bytes + int(b.nbytes) + int(h.nbytes)


def best_seconds(fn, repeat=5, min_time=0.05):
    """Best wall time of ``fn()`` (which synchronises itself), for the ``track_`` GB/s figures."""
    fn()
    best = float("inf")
    total = 0.0
    n = 0
    while n < repeat or (total < min_time and n < 50):
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        best = min(best, dt)
        total += dt
        n += 1
    return best


def to_host(x):
    if hasattr(x, "get"):
        return x.get()
    if hasattr(x, "__array__"):
        return np.asarray(x)
    return x


# -------------------------------------------------------------------- oracle
#: the oracle checks this many time steps (forward: the first, reverse: the
#: last) on at most this many lanes: h on a window of time depends only on the
#: inputs inside it, so the check is exact for those entries and stays cheap.
ORACLE_STEPS = 4096
ORACLE_LANES = 512


def _namespace(x):
    if type(x).__module__.startswith("cupy"):
        import cupy

        return cupy
    return np


def oracle_window(a, b, axis=-1, reverse=False):
    """(index, reference) for a window of the recurrence, by a plain float64 loop over time.

    Independent of scanarray: one step at a time, vectorised over lanes only.
    Device inputs are sliced on the device and only the window comes back.
    """
    xp = _namespace(b)
    bt = xp.moveaxis(b, axis, -1)
    T = bt.shape[-1]
    k = min(T, ORACLE_STEPS)
    tsl = slice(T - k, T) if reverse else slice(0, k)
    lanes_shape = bt.shape[:-1]
    b2 = bt.reshape(-1, T)
    nl = min(b2.shape[0], ORACLE_LANES)
    wide = np.complex128 if xp.iscomplexobj(b2) else np.float64
    bw = to_host(b2[:nl, tsl]).astype(wide)
    if np.isscalar(a):
        aw = np.full_like(bw, a)
    else:
        at = xp.moveaxis(xp.broadcast_to(a, b.shape), axis, -1)
        aw = to_host(at.reshape(-1, T)[:nl, tsl]).astype(wide)
    h = np.zeros(nl, dtype=wide)
    ref = np.empty_like(bw)
    steps = range(k - 1, -1, -1) if reverse else range(k)
    for t in steps:
        h = aw[:, t] * h + bw[:, t]
        ref[:, t] = h
    return (lanes_shape, nl, tsl), ref


def relative_error(h, index, ref, axis=-1):
    """‖h − ref‖ / ‖ref‖ over the oracle's window (``h`` may live on the GPU)."""
    lanes_shape, nl, tsl = index
    if type(h).__module__.startswith("cupy"):
        h = _cupy_moveaxis(h, axis)  # slice on the device, copy back only the window
    else:
        h = np.moveaxis(np.asarray(to_host(h)), axis, -1)
    T = h.shape[-1]
    hw = to_host(h.reshape(-1, T)[:nl, tsl]).astype(ref.dtype)
    return float(np.linalg.norm(hw - ref) / np.linalg.norm(ref))


def _cupy_moveaxis(h, axis):
    import cupy

    return cupy.moveaxis(h, axis, -1)


def dense_oracle(A, b, steps=1024):
    """Float64 loop ``h[t] = A[t] @ h[t-1] + b[t]`` over the first ``steps`` steps."""
    A = to_host(A[:, :steps]).astype(np.float64)
    b = to_host(b[:, :steps]).astype(np.float64)
    h = np.zeros(b.shape[:1] + b.shape[2:])
    ref = np.empty_like(b)
    for t in range(b.shape[1]):
        h = np.einsum("bij,bj->bi", A[:, t], h) + b[:, t]
        ref[:, t] = h
    return ref


def dense_relative_error(h, ref):
    hw = to_host(h[:, : ref.shape[1]]).astype(np.float64)
    return float(np.linalg.norm(hw - ref) / np.linalg.norm(ref))


# ------------------------------------------------------------ device memory
class PoolPeak:
    """Peak bytes CuPy's default memory pool hands out during a call, above what it held before.

    Wraps the pool's allocator (``cupy.cuda.set_allocator``) for the duration
    of the call: CuPy's pool keeps no high-water mark of its own.
    """

    def __init__(self):
        import cupy

        self.cupy = cupy
        self.pool = cupy.get_default_memory_pool()

    def measure(self, fn):
        cupy = self.cupy
        pool = self.pool
        gpu_sync()
        base = pool.used_bytes()
        peak = [base]

        def alloc(size):
            mem = pool.malloc(size)
            peak[0] = max(peak[0], pool.used_bytes())
            return mem

        cupy.cuda.set_allocator(alloc)
        try:
            out = fn()
            gpu_sync()
        finally:
            cupy.cuda.set_allocator(pool.malloc)
        del out
        return peak[0] - base
