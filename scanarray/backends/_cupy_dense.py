"""Dense methods of the CuPy backend: ``h[t] = A[t] @ h[t-1] + b[t]`` on the GPU.

``cyclic_reduction`` and ``prefix`` run the array-generic algorithms of
:mod:`scanarray._dense` with ``xp = cupy``: every level is one batched
``cupy.matmul`` (cuBLAS strided-batched GEMM). ``sequential`` is one CUDA
kernel stepping through time. Its critical path per step is latency, not
work (``T n^2`` multiply-adds in all), so the kernels keep ``A[t]`` several
steps in flight and split each row over ``P`` adjacent threads:

- ``n <= 32`` (and at most 128 bytes of a row per thread): one warp per lane,
  several lanes per block, ``__syncwarp`` as the only barrier;
- larger ``n``: one block per lane, one ``__syncthreads`` per step;
- ``A`` streamed through a ring of ``D`` shared-memory stages by ``cp.async``
  (``ring``, the default with a warp per lane), held ``D`` steps ahead in
  registers (``regs``, the default with a block per lane), or copied whole by
  the bulk copy engine (``bulk``, selectable, measured slower);
- where none fits (``n`` above about 128 in double precision) the first
  kernels: a block per lane, ``A[t]`` staged in shared memory while
  ``A[t+1]`` is being loaded (``staged``), or rows read straight from global
  memory (``direct``, any ``n`` up to 1024).

Measured on an H200 (docs/dense.md): a step costs about 0.25 us at n <= 4,
0.29 at n <= 16, 0.46 at n <= 32, 0.65-0.72 at n = 64 and 3.8 at n = 128,
whatever the number of lanes up to about one per SM: the sequential method is
latency-bound, far from the 10-80 ns a step's arithmetic and shuffles need
(see docs/dense.md for what was ruled out).

Full float32 precision
----------------------
cuBLAS may compute float32 (and complex64) products with TF32 tensor cores,
which keep 10 mantissa bits: about 1e-3 relative error per product, far
beyond what a scan of ``log2 T`` levels of products can absorb. Two switches
decide it in CuPy (read in CuPy's ``cupy/_core/_routines_linalg.pyx``;
cupy/cupy#3602, cupy/cupy#3810):

- CuPy's compute type per dtype (``cupy._core.set_compute_type``; the
  environment variable ``CUPY_TF32=1`` makes it ``COMPUTE_TYPE_TF32`` for
  float32/complex64). It governs 2-D products (``dot``/``tensordot``), which
  pass ``CUBLAS_COMPUTE_32F_FAST_TF32`` to ``cublasGemmEx``;
- the cuBLAS handle's math mode (``cublasSetMathMode``, e.g.
  ``CUBLAS_TF32_TENSOR_OP_MATH`` set by other code sharing CuPy's handle). It
  governs batched products, which CuPy issues with a legacy compute type
  (``CUDA_R_32F``) or through ``cublasSgemmBatched``, both following the mode.

:func:`full_precision` sets both explicitly for the duration of a call
(compute type ``COMPUTE_TYPE_DEFAULT`` = ``CUBLAS_COMPUTE_32F``, math mode
without TF32) and restores the caller's settings afterwards.
"""

from __future__ import annotations

import contextlib
import functools

import cupy
import numpy as np

from .. import _dense

__all__ = ["KERNEL", "full_precision", "linear_recurrence", "sequential"]

# cublasMath_t values (cublas_api.h); the low bits select the mode, higher
# bits are flags such as CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION.
_TENSOR_OP_MATH = 1  # deprecated, allows down-conversion on tensor cores
_TF32_TENSOR_OP_MATH = 3
_MODE_MASK = 0xF


@contextlib.contextmanager
def full_precision():
    """Within the block, CuPy's float32/complex64 products are computed in full FP32.

    Sets CuPy's compute type for float32 to ``COMPUTE_TYPE_DEFAULT`` unless it
    is already ``COMPUTE_TYPE_PEDANTIC``, and clears a TF32 (or tensor-op)
    math mode on the current device's cuBLAS handle; both are restored on
    exit. float64 and complex128 are never down-converted by cuBLAS.
    """
    from cupy._core import _routines_linalg as linalg
    from cupy_backends.cuda.libs import cublas

    old_type = linalg.get_compute_type(np.float32)  # resolves CUPY_TF32 on first use
    keep = (linalg.COMPUTE_TYPE_DEFAULT, linalg.COMPUTE_TYPE_PEDANTIC, linalg.COMPUTE_TYPE_FP32)
    if old_type not in keep:
        linalg.set_compute_type(np.float32, linalg.COMPUTE_TYPE_DEFAULT)
    handle = cupy.cuda.device.get_cublas_handle()
    old_mode = cublas.getMathMode(handle)
    if (old_mode & _MODE_MASK) in (_TENSOR_OP_MATH, _TF32_TENSOR_OP_MATH):
        cublas.setMathMode(handle, old_mode & ~_MODE_MASK)  # CUBLAS_DEFAULT_MATH + the same flags
    try:
        yield
    finally:
        if old_type not in keep:
            linalg.set_compute_type(np.float32, old_type)
        if (old_mode & _MODE_MASK) in (_TENSOR_OP_MATH, _TF32_TENSOR_OP_MATH):
            cublas.setMathMode(handle, old_mode)


def linear_recurrence(p):
    """Compute the dense problem ``p`` (a :class:`scanarray._problem.Problem`) into ``p.out``."""
    if p.method == "sequential":
        return sequential(p.a, p.b, p.initial, p.dtype, p.reverse, p.out)
    with full_precision():
        h = _dense.METHODS[p.method](cupy, p.a, p.b, p.initial, p.dtype, reverse=p.reverse, out=p.out)
    if h is not p.out:  # out of another dtype (half precision storage): one casting copy
        p.out[...] = h
    return p.out


# --------------------------------------------------------------------------- sequential kernel


_TYPENAMES = {
    np.dtype(np.float32): "float",
    np.dtype(np.float64): "double",
    np.dtype(np.complex64): "complex<float>",
    np.dtype(np.complex128): "complex<double>",
}


#: registers per thread for prefetching A[t+1] in the staged kernel
_KS = (1, 2, 4, 8, 16, 32, 64)
#: shared memory the staged kernel may ask for (opt-in above 48 KiB; sm_80+ allow more than 160 KiB)
_MAX_SHARED = 160 * 1024


def _names():
    names = []
    for t in _TYPENAMES.values():
        names.append(f"dense_sequential_direct<{t}>")
        names += [f"dense_sequential_staged<{t}, {k}>" for k in _KS]
    return names


@cupy._util.memoize(for_each_device=True)
def _module():
    # C++17: CuPy's complex.cuh pulls in CCCL/Thrust, which requires it (CuPy 14).
    from ._cupy_common import read_source

    return cupy.RawModule(code=read_source("dense.cu"), options=("--std=c++17",), name_expressions=_names())


def _round32(x):
    return max(32, -(-x // 32) * 32)


def _kernel(dt, n):
    """``(function, threads, shared bytes)``: the staged kernel when its tiles fit, else the direct one.

    The staged kernel prefetches ``K`` elements of ``A[t+1]`` per thread; ``K``
    is capped at 256 bytes of registers per thread (more spills, measured
    with ``ptxas -v`` for sm_90), so large ``n`` take more threads than rows.
    """
    dt = np.dtype(dt)
    shared = (2 * n * (n + 1) + 2 * n) * dt.itemsize
    base = max(32, n, -(-n * n // (256 // dt.itemsize)))
    threads = -(-base // n) * n  # a multiple of n: the kernel maps elements to rows without division
    K = next((k for k in _KS if k * threads >= n * n), None)
    if threads <= 1024 and K is not None and shared <= _MAX_SHARED:
        f = _module().get_function(f"dense_sequential_staged<{_TYPENAMES[dt]}, {K}>")
        if shared > 48 * 1024:
            f.max_dynamic_shared_size_bytes = shared
        return f, threads, shared
    threads = _round32(n)
    if threads > 1024:
        raise ValueError(f"method='sequential' on CuPy supports n <= 1024; got n = {n}")
    return _module().get_function(f"dense_sequential_direct<{_TYPENAMES[dt]}>"), threads, 2 * n * dt.itemsize


#: Which sequential kernel to use: "auto", or one of "ring", "regs", "bulk", "staged", "direct"
#: (benchmarks and tests set this; a kernel that does not apply falls back). "auto", from
#: benchmarks/bench_dense.py on an NVIDIA H200 (2026-11-21, benchmarks/results/dense_2026-11-21.md):
#: a warp per lane (n <= 32 in float32) takes "ring" with the shared state (X = 0): at
#: (B, T, n) = (64, 1024, 16) 0.352 ms against 0.394 (shuffled state), 0.401 (outputs every 32
#: steps) and 0.556-0.585 ("regs"); a block per lane takes "regs" with outputs every 32 steps
#: (X = 2) and 8 columns per thread: at (8, 4096, 64) 2.639 ms against 2.794-2.984 (other "regs"),
#: 2.853-3.265 ("bulk") and 3.93-4.09 ("ring"); "ring" where "regs" does not fit in registers.
KERNEL = "auto"
#: Steps in flight (``D``) for "ring"/"regs"/"bulk"; None picks the largest that fits (see :func:`_config`).
STAGES = None
#: How a step's state reaches the other threads (``X`` in dense.cu): 0 shared memory + barrier,
#: 1 shuffles (a warp per lane only), 2 as 0 with outputs written every 32 steps; None: the default
#: (``_EXCHANGE_DEFAULT``: warp per lane, block per lane; measured as above).
EXCHANGE = None
_EXCHANGE_DEFAULT = (0, 2)
#: Bytes of a row per thread with a block per lane; None: 8 columns (4 in complex128), measured
#: 2.639 ms against 2.978 with 16 columns at (8, 4096, 64), "regs", X = 2.
ROW_BYTES = None
#: Benchmarks only: bit 0 makes the new kernels skip their output stores (results not written).
DIAG = 0
_KO = 32  # DENSE_KO in dense.cu

_RING_D = (2, 3, 4, 6, 8, 12, 16)
_REGS_D = (2, 4, 8, 16)


def _pow2_floor(x):
    return 1 << (max(1, x).bit_length() - 1)


@cupy._util.memoize(for_each_device=True)
def _device_limits():
    """(opt-in shared memory per block, multiprocessor count) of the current device."""
    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    return int(props.get("sharedMemPerBlockOptin", 48 * 1024)), int(props["multiProcessorCount"])


def _mapping(dt, n, aligned=True):
    """``(warp, P, C, N2, U, G)`` of the latency-bound kernels (see dense.cu), or None.

    ``P`` threads share a row, each with ``C`` columns, ``P * C = N2`` (the
    next power of two >= n). A warp per lane while a thread's ``C`` elements
    take at most 128 bytes (n <= 32 in float32); else a block of ``G`` threads
    with 8 columns of a row per thread (4 in complex128; ``ROW_BYTES``), more
    if ``G`` would pass 1024. ``U``: elements per copy, 16 bytes where rows are 16-byte aligned.
    """
    size = dt.itemsize
    N2 = 1 << max(0, (n - 1).bit_length())
    Uv = 16 // size
    if n <= 32:
        P = min(_pow2_floor(32 // n), N2)
        C = N2 // P
        if C * size <= 128:
            U = Uv if (aligned and n % Uv == 0 and C % Uv == 0) else 1
            return True, P, C, N2, U, 32
    C = min(N2, max(1, (ROW_BYTES or min(8 * size, 64)) // size))
    P = N2 // C
    while _round32(n * P) > 1024 and C < 32:
        C *= 2
        P = N2 // C
    G = _round32(n * P)
    if G > 1024:
        return None
    U = Uv if (aligned and n % Uv == 0 and C % Uv == 0) else 1
    return False, P, C, N2, U, G


def _state_elems(X, N2):
    """Shared state per lane (``dense_state_elems`` in dense.cu)."""
    return 0 if X == 1 else (2 * N2 + 2 * _KO * N2 if X == 2 else 2 * N2)


def _config(dt, n, L, kind, limits, aligned=True, stages=None, exchange=None):
    """``(name, lanes per block, threads, shared bytes, P)`` for kernel ``kind``, or None.

    ``kind`` "ring": ``A`` through ``D`` shared-memory stages (per block at most
    64 KiB with a warp per lane, the opt-in limit with a block per lane);
    "regs": ``D`` steps of a thread's ``C`` elements in registers, at most 512
    bytes (128 registers). ``D`` is the largest that fits unless ``stages``.
    """
    m = _mapping(dt, n, aligned)
    if m is None:
        return None
    warp, P, C, N2, U, G = m
    size = dt.itemsize
    optin, sms = limits
    lpb = 1 if (not warp or L <= sms) else 4  # few lanes: one per SM; many: 4 warps per block
    NB = G * lpb
    X = _EXCHANGE_DEFAULT[0 if warp else 1] if exchange is None else exchange
    if X == 1 and not warp:
        X = _EXCHANGE_DEFAULT[1]
    h_bytes = lpb * _state_elems(X, N2) * size
    extra = 0
    if kind == "bulk":  # whole A[t] per bulk copy: a block per lane, 16-byte multiples, aligned
        if warp or (n * n * size) % 16 or not aligned:
            return None
        extra = -(-_RING_D[-1] * 8 // 16) * 16  # the mbarriers
        stage = (n * n + NB) * size
        fits = [d for d in _RING_D if d * stage <= optin - h_bytes - extra]
    elif kind == "ring":
        stage = NB * (C + 1) * size
        budget = (64 * 1024 if warp else optin) - h_bytes
        fits = [d for d in _RING_D if d * stage <= budget and (not warp or d in (2, 4, 8, 16))]
    else:
        stage = 0
        # 64K registers per block, about 48 of them per thread besides the buffers
        room = min(512, (65536 // NB - 48) * 4)
        fits = [d for d in _REGS_D if d * C * size <= room]
    if stages is not None:
        fits = [d for d in fits if d == stages] or fits[:1]
    if not fits:
        return None
    D = fits[-1]
    if kind == "bulk":
        return f"dense_sequential_bulk<{_TYPENAMES[dt]}, {C}, {D}, {X}>", lpb, NB, extra + D * stage + h_bytes, P
    name = f"dense_sequential_{kind}<{_TYPENAMES[dt]}, {C}, {U}, {D}, {'true' if warp else 'false'}, {X}>"
    return name, lpb, NB, D * stage + h_bytes, P


@functools.lru_cache(maxsize=None)
def _group(dt, kind, limits, exchange):
    """Every instantiation ``kind`` can use for ``dt``: compiled in one NVRTC call (one front end)."""
    names = set()
    for n in range(1, 129):
        for L in (1, 1 << 20):
            for aligned in (True, False):
                c = _config(dt, n, L, kind, limits, aligned, None, exchange)
                if c is not None:
                    names.add(c[0])
    return tuple(sorted(names))


def _plan(dt, n, L, kind, aligned):
    """``(function, grid, block, shared bytes, P)`` for kernel ``kind`` ("ring"/"regs"), or None."""
    from ._cupy_common import get_function

    limits = _device_limits()
    c = _config(dt, n, L, kind, limits, aligned, STAGES, EXCHANGE)
    if c is None:
        return None
    name, lpb, NB, shared, P = c
    f = get_function("dense.cu", name, group=_group(dt, kind, limits, EXCHANGE) if STAGES is None else ())
    if f.max_threads_per_block < NB:  # too many registers for this block size
        return None
    if shared > 48 * 1024:
        f.max_dynamic_shared_size_bytes = shared
    return f, (-(-L // lpb),), (NB,), shared, P


def sequential(A, b, h0, dt, reverse, out):
    """The sequential dense scan in one kernel launch; writes ``out`` (canonical view) and returns it.

    ``A`` is never expanded along time (a time-invariant ``A`` is read with
    time stride 0) nor across lanes when it is shared by all of them; an
    ``A`` broadcast over only some lane axes is expanded over those.
    """
    dt = np.dtype(dt)
    lanes = b.shape[:-2]
    T, n = b.shape[-2], b.shape[-1]
    L = int(np.prod(lanes, dtype=np.int64))
    Ac = _dense.compact(A)
    TA = Ac.shape[-3]
    a_lanes = Ac.shape[:-3]
    if all(s == 1 for s in a_lanes):
        A2 = cupy.ascontiguousarray(Ac.reshape(TA, n, n), dtype=dt)
        a_lane = 0
    else:
        full = cupy.broadcast_to(Ac, lanes + (TA, n, n))  # only lane axes; time stays TA
        A2 = cupy.ascontiguousarray(full, dtype=dt)
        a_lane = TA * n * n
    a_time = 0 if TA == 1 else n * n
    B2 = cupy.ascontiguousarray(b, dtype=dt)
    direct = out.dtype == dt and out.flags.c_contiguous
    H = out if direct else cupy.empty(b.shape, dt)
    if h0 is not None:
        h2 = cupy.ascontiguousarray(cupy.broadcast_to(h0, lanes + (n,)), dtype=dt)
    else:
        h2 = cupy.empty((1,), dt)
    args = (A2, np.int64(a_lane), np.int64(a_time), B2, H, h2, np.int32(h0 is not None),
            np.int32(T), np.int32(n), np.int32(bool(reverse)))
    plan = None
    # cp.async copies b element by element: it needs b's elements aligned to their size
    if L > 0 and T > 0 and KERNEL in ("auto", "ring", "regs", "bulk") and B2.data.ptr % dt.itemsize == 0:
        aligned = A2.data.ptr % 16 == 0  # 16-byte copies of A need 16-byte rows
        if KERNEL == "auto":
            m = _mapping(dt, n, aligned)
            kinds = ("ring",) if m is None or m[0] else ("regs", "ring")
        else:
            kinds = {"ring": ("ring",), "regs": ("regs", "ring"), "bulk": ("bulk", "ring")}[KERNEL]
        for kind in kinds:
            if kind == "bulk" and a_time == 0:  # nothing to stream
                continue
            plan = _plan(dt, n, L, kind, aligned)
            if plan is not None:
                break
    if plan is not None:
        f, grid, block, shared, P = plan
        f(grid, block, args + (np.int32(L), np.int32(P), np.int32(DIAG)), shared_mem=shared)
    elif L > 0 and T > 0:
        kernel, threads, shared = _kernel(dt, n)
        if KERNEL == "direct":
            threads = _round32(n)
            kernel, shared = _module().get_function(f"dense_sequential_direct<{_TYPENAMES[dt]}>"), 2 * n * dt.itemsize
        kernel((L,), (threads,), args, shared_mem=shared)
    if not direct:
        out[...] = H
    return out
