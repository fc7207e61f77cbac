"""Dense methods of the CuPy backend: ``h[t] = A[t] @ h[t-1] + b[t]`` on the GPU.

``cyclic_reduction`` and ``prefix`` run the array-generic algorithms of
:mod:`scanarray._dense` with ``xp = cupy``: every level is one batched
``cupy.matmul`` (cuBLAS strided-batched GEMM). ``sequential`` is one CUDA
kernel: a thread block per lane steps through time, thread ``i`` computing
row ``i`` of ``A[t] @ h[t-1]`` from the state kept in shared memory; ``A[t]``
is staged in shared memory while ``A[t+1]`` is being loaded.

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

import cupy
import numpy as np

from .. import _dense

__all__ = ["full_precision", "linear_recurrence", "sequential"]

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
    kernel, threads, shared = _kernel(dt, n)
    kernel(
        (L,), (threads,),
        (A2, np.int64(a_lane), np.int64(a_time), B2, H, h2, np.int32(h0 is not None),
         np.int32(T), np.int32(n), np.int32(bool(reverse))),
        shared_mem=shared,
    )
    if not direct:
        out[...] = H
    return out
