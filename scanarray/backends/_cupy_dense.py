"""Dense methods of the CuPy backend: ``h[t] = A[t] @ h[t-1] + b[t]`` on the GPU.

``cyclic_reduction`` and ``prefix`` run the array-generic algorithms of
:mod:`scanarray._dense` with ``xp = cupy``: every level is one batched
``cupy.matmul`` (cuBLAS strided-batched GEMM). ``sequential`` is one CUDA
kernel: a thread block per lane steps through time, thread ``i`` computing
row ``i`` of ``A[t] @ h[t-1]`` from the state kept in shared memory.

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

_SOURCE = r"""
#include <cupy/complex.cuh>

// One block per lane; thread i owns row i of the state. The state lives in
// shared memory, double-buffered so one barrier per step suffices. A is
// (LA, TA, n, n) contiguous with LA in {1, lanes} and TA in {1, T}: the
// strides a_lane and a_time are 0 for a shared or time-invariant A.
template<typename T>
__global__ void dense_sequential(const T* __restrict__ A, long long a_lane, long long a_time,
                                 const T* __restrict__ B, T* __restrict__ H,
                                 const T* __restrict__ h0, int has_h0,
                                 int steps, int n, int reverse) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T* h = reinterpret_cast<T*>(smem_raw);  // 2 * n
    const long long lane = blockIdx.x;
    const int i = threadIdx.x;
    const T* Al = A + lane * a_lane;
    const T* Bl = B + lane * (long long)steps * n;
    T* Hl = H + lane * (long long)steps * n;
    if (i < n) h[i] = has_h0 ? h0[lane * n + i] : T(0);
    __syncthreads();
    int cur = 0;
    for (int s = 0; s < steps; ++s) {
        const long long t = reverse ? (steps - 1 - s) : s;
        if (i < n) {
            T acc = Bl[t * n + i];
            const T* row = Al + t * a_time + (long long)i * n;
            const T* hv = h + cur * n;
            for (int j = 0; j < n; ++j) acc += row[j] * hv[j];
            Hl[t * n + i] = acc;
            h[(1 - cur) * n + i] = acc;
        }
        __syncthreads();
        cur = 1 - cur;
    }
}
"""

_TYPENAMES = {
    np.dtype(np.float32): "float",
    np.dtype(np.float64): "double",
    np.dtype(np.complex64): "complex<float>",
    np.dtype(np.complex128): "complex<double>",
}


@cupy._util.memoize(for_each_device=True)
def _module():
    names = [f"dense_sequential<{t}>" for t in _TYPENAMES.values()]
    return cupy.RawModule(code=_SOURCE, options=("--std=c++14",), name_expressions=names)


def _kernel(dt):
    return _module().get_function(f"dense_sequential<{_TYPENAMES[np.dtype(dt)]}>")


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
    threads = max(32, -(-n // 32) * 32)
    if threads > 1024:
        raise ValueError(f"method='sequential' on CuPy supports n <= 1024; got n = {n}")
    _kernel(dt)(
        (L,), (threads,),
        (A2, np.int64(a_lane), np.int64(a_time), B2, H, h2, np.int32(h0 is not None),
         np.int32(T), np.int32(n), np.int32(bool(reverse))),
        shared_mem=2 * n * dt.itemsize,
    )
    if not direct:
        out[...] = H
    return out
