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

``chunked`` (:func:`chunked`) splits time into chunks of about ``sqrt(T)``
steps and launches three kernels: every chunk's transition product and end
state at once (``dense_chunk_products``), the carries over chunks and the
rerun of every chunk (both the sequential kernels above, on reshaped lanes):
a critical path of about ``2 sqrt(T)`` steps for ``T n^3`` multiply-adds.
Measured on an H200: 0.176 ms at (B, T, n) = (64, 1024, 16), 1.10 ms at
(8, 4096, 64), against 0.41 and 2.50 for ``sequential`` (docs/dense.md).

``lookback`` (:func:`lookback`, ``cuda/dense_lookback.cu``) does the same in
one launch for n <= 32: a block per (lane, chunk) computes the chunk's map in
shared memory and finds its entering state by a decoupled look-back over its
predecessors' published maps (Merrill & Garland 2016); ``A`` streams through
a small shared-memory ring per product group (read again from L2 for the
rerun). Measured on an H200: 0.126 ms one call / 0.100 ms back to back at
(64, 1024, 16) against 0.183 / 0.137 for ``chunked`` (docs/dense.md, "CuPy
``lookback``").

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

from ... import _config as _settings
from ... import _dense
from . import _common
from ._common import Binder
from .scan import _tile_options, _workspace_at

__all__ = ["KERNEL", "chunked", "full_precision", "linear_recurrence", "lookback", "sequential"]

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
    kernel = {"sequential": sequential, "chunked": chunked, "lookback": lookback}.get(p.method)
    if kernel is not None:
        done = kernel(p.a, p.b, p.initial, p.dtype, p.reverse, p.out)
        dev = cupy.cuda.runtime.getDevice()
        if done is not None and p.b.data.device_id == dev:
            # launches on the caller's own memory: a repeated call can go straight to them
            p.bind = Binder(done[0], dev, *done[1:])
        return p.out
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
    from ._common import read_source

    return cupy.RawModule(code=read_source("dense.cu"), options=("--std=c++17",), name_expressions=_names())


# --------------------------------------------------------------------------- launches


class _Role:
    """An argument of a planned launch that each call fills in (see :class:`_Launches`): value
    ``slot`` of the call's list, plus ``offset``; ``cast`` gives it its parameter's type where CuPy's
    own launch call (or the first packed launch, whose argument types fix the layout) needs one."""

    __slots__ = ("cast", "offset", "slot")

    def __init__(self, slot, offset=0, cast=None):
        self.slot, self.offset, self.cast = slot, offset, cast


_A, _B, _OUT, _H0 = _Role(0), _Role(1), _Role(2), _Role(3)
_WS, _WS_COUNTER, _WS_EPOCH = _Role(5), _Role(6, cast=np.uint64), _Role(7, cast=np.uint32)


def _work(offset):
    """The argument ``offset`` bytes into the call's scratch buffer."""
    return _Role(4, offset)


class _Launches:
    """A dense call's kernel launches on device pointers: the full path's, and those of calls bound
    to its signature (:class:`._cupy_common.Binder`).

    ``steps`` holds ``(function, blocks, threads, shared bytes, arguments)`` per launch, where an
    argument may be a role that each call fills in: ``_A``, ``_B``, ``_OUT`` (the canonical views'
    device pointers), ``_H0`` (the initial state's; without one ``b``'s, which the kernels then
    never read), ``_work(offset)`` (into a scratch buffer of ``work`` bytes, allocated per call
    from CuPy's pool on the current stream) and ``_WS``, ``_WS_COUNTER``, ``_WS_EPOCH`` (the
    look-back workspace of ``ws = (status bytes, slots)``, taken for the first launch's tiles).
    With ``phases``, ``PHASE_EVENTS`` (when set) gets an event before each launch and after the last.
    """

    def __init__(self, steps, work=0, ws=None, phases=False):
        self.steps = [(f, int(blocks), int(threads), shared, list(args),
                       tuple((i, r.slot, r.offset, r.cast) for i, r in enumerate(args) if isinstance(r, _Role)))
                      for f, blocks, threads, shared, args in steps]
        self.work, self.ws, self.phases = work, ws, phases

    def _call(self, stream_ptr, pa, pb, po, ph0, dev, run):
        """Fill one call's values of the roles and ``run(stream_ptr, vals)``: the operands, the
        scratch buffer (from CuPy's pool on this stream; back to the pool at return, where later
        work is ordered after these launches) and the stream's look-back workspace."""
        vals = [pa, pb, po, pb if ph0 is None else ph0, 0, 0, 0, 0]
        if self.work:
            scratch = cupy.empty(self.work, np.uint8)
            vals[4] = scratch.data.ptr
        if self.ws is None:
            run(stream_ptr, vals)
            return
        ws = _workspace_at(dev, stream_ptr, *self.ws)
        with ws.launching(self.steps[0][1]):
            vals[5:] = ws.ptr, ws.counter, ws.epoch
            run(stream_ptr, vals)

    def direct(self, dev):
        """For bound calls: ``go(stream_ptr, pa, pb, po, ph0)`` doing what :meth:`launch_ptrs` does,
        with each launch's arguments packed once and only the roles packed per call; None where a
        launch is not packed (diagnostics, ``PACKED_LAUNCH`` off) or phases are timed."""
        if self.phases and PHASE_EVENTS is not None:
            return None
        gos = []
        for f, blocks, threads, shared, template, roles in self.steps:
            packed = _launchers.get(f) if (LOOKBACK_DIAG is None and _common.PACKED_LAUNCH) else None
            go = packed.bind_roles(blocks, threads, shared, [0 if isinstance(x, _Role) else x for x in template],
                                   [r[:3] for r in roles]) if packed else None
            if go is None:
                return None
            gos.append(go)

        def run(stream_ptr, vals):
            for g in gos:
                g(stream_ptr, vals)

        call = self._call
        return lambda stream_ptr, pa, pb, po, ph0: call(stream_ptr, pa, pb, po, ph0, dev, run)

    def launch_ptrs(self, cupy, pa, pb, po, ph0, dev=None):
        """Launch on the current device and stream (``ph0`` None: no initial state)."""
        self._call(cupy.cuda.get_current_stream().ptr, pa, pb, po, ph0, cupy.cuda.Device().id if dev is None else dev,
                   self._run)

    def _run(self, stream_ptr, vals):
        # (_launch launches on the current stream, which is stream_ptr)
        ev = PHASE_EVENTS if self.phases else None
        for f, blocks, threads, shared, template, roles in self.steps:
            args = template.copy()
            for i, slot, offset, cast in roles:
                v = vals[slot] + offset
                args[i] = v if cast is None else cast(v)
            if ev is not None:
                ev.append(cupy.cuda.Event())
                ev[-1].record()
            _launch(f, blocks, threads, args, shared)
        if ev is not None:
            ev.append(cupy.cuda.Event())
            ev[-1].record()


def _allow_shared(f, shared):
    """Let ``f`` take ``shared`` bytes of dynamic shared memory (opt-in above 48 KiB). Never lowers
    the limit: plans of other shapes share the compiled function, and a launch above it fails with
    CUDA_ERROR_INVALID_VALUE (seen on the H200 when a larger plan ran after a smaller one)."""
    if shared > 48 * 1024 and f.max_dynamic_shared_size_bytes < shared:
        f.max_dynamic_shared_size_bytes = shared


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
        _allow_shared(f, shared)
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


def _mapping(dt, n, aligned=True, row_bytes=None):
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
    C = min(N2, max(1, (ROW_BYTES or row_bytes or min(8 * size, 64)) // size))
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


def _config(dt, n, L, kind, limits, aligned=True, stages=None, exchange=None, row_bytes=None):
    """``(name, lanes per block, threads, shared bytes, P)`` for kernel ``kind``, or None.

    ``kind`` "ring": ``A`` through ``D`` shared-memory stages (per block at most
    64 KiB with a warp per lane, the opt-in limit with a block per lane);
    "regs": ``D`` steps of a thread's ``C`` elements in registers, at most 512
    bytes (128 registers). ``D`` is the largest that fits unless ``stages``.
    """
    m = _mapping(dt, n, aligned, row_bytes)
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
        # the chunked rerun's shape with more lanes than SMs too (float32, n > 32)
        shapes = [(None, None)] + ([(RERUN_STAGES, RERUN_ROW_BYTES)] if kind == "regs" and dt == np.float32
                                   and n > 32 else [])
        for L in (1, 1 << 20):
            for aligned in (True, False):
                for stages, row_bytes in shapes:
                    c = _config(dt, n, L, kind, limits, aligned, stages, exchange, row_bytes)
                    if c is not None:
                        names.add(c[0])
    return tuple(sorted(names))


def _plan(dt, n, L, kind, aligned, stages=None, row_bytes=None):
    """``(function, grid, block, shared bytes, P)`` for kernel ``kind`` ("ring"/"regs"), or None;
    ``stages``, ``row_bytes``: ``D`` and a thread's bytes of a row where ``STAGES``, ``ROW_BYTES``
    are unset."""
    from ._common import get_function

    limits = _device_limits()
    c = _config(dt, n, L, kind, limits, aligned, STAGES if stages is None else stages, EXCHANGE, row_bytes)
    if c is None:
        return None
    name, lpb, NB, shared, P = c
    f = get_function("dense.cu", name, group=_group(dt, kind, limits, EXCHANGE) if STAGES is None else ())
    if f.max_threads_per_block < NB:  # too many registers for this block size
        return None
    _allow_shared(f, shared)
    return f, (-(-L // lpb),), (NB,), shared, P


def sequential(A, b, h0, dt, reverse, out):
    """The sequential dense scan in one kernel launch into ``out`` (the canonical view).

    ``A`` is never expanded along time (a time-invariant ``A`` is read with
    time stride 0) nor across lanes when it is shared by all of them; an
    ``A`` broadcast over only some lane axes is expanded over those. Returns
    what a call bound to this signature repeats, ``(launches, pa, pb, po,
    ph0)`` (:func:`_owned`), or None.
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
    h2 = None if h0 is None else cupy.ascontiguousarray(cupy.broadcast_to(h0, lanes + (n,)), dtype=dt)
    args = (_A, np.int64(a_lane), np.int64(a_time), _B, _OUT, _H0, np.int32(h0 is not None),
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
        plain = (np.int32(1), np.int64(0), np.int64(T * n), np.int32(T))  # dense_lane: no chunks
        step = (f, grid[0], block[0], shared, args + (np.int32(L), np.int32(P), np.int32(DIAG)) + plain)
    elif L > 0 and T > 0:
        kernel, threads, shared = _kernel(dt, n)
        if KERNEL == "direct":
            threads = _round32(n)
            kernel, shared = _module().get_function(f"dense_sequential_direct<{_TYPENAMES[dt]}>"), 2 * n * dt.itemsize
        step = (kernel, L, threads, shared, args)
    else:
        step = None
    launches = None if step is None else _Launches([step])
    return _owned(launches, A, b, h0, out, A2, B2, H, h2)


def _owned(launches, A, b, h0, out, A2, B2, H, h2):
    """Run ``launches`` on ``A2``, ``B2``, ``H``, ``h2`` (``h2`` None: no initial state) and copy
    ``H`` to ``out`` where they differ; return ``(launches, pa, pb, po, ph0)`` where everything ran
    on the caller's own memory (the operands are views of ``A``, ``b``, ``h0``, ``out``, never
    copies), which a call bound to this signature repeats, else None."""
    ptrs = (A2.data.ptr, B2.data.ptr, H.data.ptr, None if h2 is None else h2.data.ptr)
    if launches is not None:
        launches.launch_ptrs(cupy, *ptrs)
    if H is not out:
        out[...] = H
        return None
    own = A2.data.mem is A.data.mem and B2.data.mem is b.data.mem and (h0 is None or h2.data.mem is h0.data.mem)
    return (launches, *ptrs) if own and launches is not None else None


# --------------------------------------------------------------------------- chunked


#: Chunk length ``L`` of :func:`chunked`; None: about ``CHUNK_FACTOR * sqrt(T)`` (at least 4).
#: The products pass costs ``T n^3`` multiply-adds whatever ``L``; the two latency-bound passes
#: take ``T / L`` (carries) and ``L`` (rerun) steps, fewest at ``L = sqrt(T)``.
CHUNK_L = None
CHUNK_FACTOR = 1.0
#: Register tile ``R`` (``R x R`` elements of the next product per thread) and ring depth ``D``
#: of the products kernel; None: :func:`_chunk_tile` and the deepest of (4, 3, 2) that fits.
CHUNK_R = None
CHUNK_D = None
#: Fewer chunks than this: the plain sequential kernel (nothing to gain from three passes).
CHUNK_MIN = 3
#: Benchmarks only: a list to which :func:`chunked` appends a CUDA event before each pass and after the last.
PHASE_EVENTS = None

#: ``D`` and a thread's bytes of a row of the chunked rerun's register kernel where its lanes
#: outnumber the SMs (float32, n > 32; ``STAGES`` and ``ROW_BYTES`` override them).
RERUN_STAGES = 2
RERUN_ROW_BYTES = 64
_CHUNK_RS = (1, 2, 4, 8)
_CHUNK_DS = (2, 3, 4)
#: Products on tensor cores (``dense_chunk_products_mma``, three TF32 products per multiply) for
#: float32 with 9 <= n <= 64 on sm_80+ where ``CHUNK_R`` is unset; False: the FMA kernel.
CHUNK_MMA = True
#: Benchmarks only: blocks per SM the tensor-core kernel's registers must allow
#: (``DENSE_MMA_MINB``) and its operand split (``SA_TF32_SPLIT``, cuda/tf32x3.cuh); None: defaults.
CHUNK_MMA_MINB = None
CHUNK_MMA_SPLIT = None
#: Benchmarks only: 0 sums the tensor core's main products in one accumulation chain per output
#: tile instead of per k-tile in float32 (``DENSE_MMA_FRESH``; biased on same-sign data, dense.cu).
CHUNK_MMA_FRESH = None
#: Products for 32 < n <= 64 on Hopper's warpgroup MMAs (sm_90a, compute capability 9.0 only): 0
#: keeps ``mma.sync``; 16 (``_H16``) splits operands into FP16 pieces (``dense_chunk_products_h16``);
#: 8, 4 or 2 into TF32 pieces (``dense_chunk_products_mma<64, D, WG>``), WG the length in k-tiles of
#: the main products' tensor-core accumulation chains, summed in float32 (2: one pair at a time).
#: None: ``_MMA_WG``. At (8, 4096, 64) on an H200 (2026-11-22 00:42 UTC, L = 84): TF32 pairs 293 us
#: against mma.sync's 471 (L = 64); 1.46e-5 relative error at spectral radius 0.99 on non-negative
#: data with chains of 8 (over float32's 1e-5), 6.1e-6 with 4, 3.0e-6 with pairs. FP16 pieces
#: (07:21 UTC): 210.6 us against TF32 pairs' 257.3, 3.97e-6 on that data.
CHUNK_MMA_WG = None
#: ``CHUNK_MMA_WG`` value of the products on FP16 pieces (``dense_chunk_products_h16``: x = hi +
#: 2^-11 lo in half precision, rows scaled by powers of two into its range; dense.cu).
_H16 = 16
#: ... and of the same products warp-specialized (``dense_chunk_products_ws``: a warpgroup splits
#: ``A[t]`` into ``_H16_WS_NB`` buffers of pieces while another multiplies; 256 threads a block).
_H16_WS = 32
_H16_WS_NB = 2
_MMA_WG = _H16
#: Benchmarks only: ``DENSE_WG_OPT`` of the warpgroup products kernel (bits of its step's
#: arrangement, dense.cu; None: the shipped one).
CHUNK_MMA_WG_OPT = None
_MMA_NS = (16, 32, 64)


def _chunk_mma_n(dt, n):
    """``N`` (n padded to 16, 32 or 64) of the tensor-core products kernel, or None where it does not apply."""
    if not CHUNK_MMA or CHUNK_R or dt != np.float32 or not 8 < n <= 64:
        return None
    if int(cupy.cuda.Device().compute_capability) < 80:
        return None
    return next(N for N in _MMA_NS if n <= N)


def _mma_wg(N):
    """``WG`` of the tensor-core products kernel for padded size ``N`` on the current device: 0
    (``mma.sync``) except at N = 64 on compute capability 9.0 (see ``CHUNK_MMA_WG``)."""
    if N != 64 or int(cupy.cuda.Device().compute_capability) != 90:
        return 0
    return _MMA_WG if CHUNK_MMA_WG is None else int(CHUNK_MMA_WG)


def _mma_product_plan(N, total, D):
    """``(function, blocks, threads, shared bytes, 1)`` of the tensor-core products kernel: a block
    of ``2 N`` threads per (lane, chunk) (``4 N`` warp-specialized), ``A`` through a ring of ``D``
    steps (default 4; 3 at N = 64, where 4 blocks of 50 KB share an SM: see ``DENSE_MMA_MINB`` in
    dense.cu; 2 on warpgroup MMAs, where 3 blocks of 65-66 KB do; 3 warp-specialized, 2 blocks of
    82 KB)."""
    from ._common import get_function

    wg = _mma_wg(N)
    D = D or (3 if wg == _H16_WS else 2 if wg else 3 if N == 64 else 4)
    # A's ring and b's, e's double buffer, then per kernel: B's pieces (TF32 and FP16 alike: N x N
    # words a buffer, one or two buffers), 2^sigma and flags, mbarriers
    shared = (D * N * N + D * N + 2 * N) * 4
    threads = 2 * N
    if wg == _H16:  # FP16 pieces: two B buffers of N x N words, e and 2^sigma double-buffered
        shared += (2 * N * N + 2 * N) * 4
        f = get_function("dense.cu", f"dense_chunk_products_h16<{D}>", ("-arch=sm_90a",))
    elif wg == _H16_WS:  # and warp-specialized: NB buffers, a D-stage ring, flags, 2 NB mbarriers
        shared += (_H16_WS_NB * N * N + _H16_WS_NB * N + 4) * 4 + 16 * _H16_WS_NB
        f = get_function("dense.cu", f"dense_chunk_products_ws<{D}, {_H16_WS_NB}>", ("-arch=sm_90a",))
        threads = 4 * N
    elif wg:  # its own module: sm_90a code (wgmma) runs on compute capability 9.0 only
        shared += 2 * N * N * 4
        opts = ("-arch=sm_90a",) + (() if CHUNK_MMA_WG_OPT is None else (f"-DDENSE_WG_OPT={int(CHUNK_MMA_WG_OPT)}",))
        f = get_function("dense.cu", f"dense_chunk_products_mma<{N}, {D}, {wg}>", opts)
    else:
        opts = ()
        if CHUNK_MMA_MINB is not None:
            opts += (f"-DDENSE_MMA_MINB={int(CHUNK_MMA_MINB)}",)
        if CHUNK_MMA_SPLIT is not None:
            opts += (f"-DSA_TF32_SPLIT={int(CHUNK_MMA_SPLIT)}",)
        if CHUNK_MMA_FRESH is not None:
            opts += (f"-DDENSE_MMA_FRESH={int(CHUNK_MMA_FRESH)}",)
        # every shape in one NVRTC call; a benchmark's own options: only the one it times
        group = () if opts else tuple(f"dense_chunk_products_mma<{m}, {d}>" for m in _MMA_NS for d in _CHUNK_DS)
        f = get_function("dense.cu", f"dense_chunk_products_mma<{N}, {D}>", opts, group=group)
    _allow_shared(f, shared)
    # As much shared memory as the SM has: by default the driver's carveout held the N = 64 kernel
    # to 2 blocks per SM by shared memory as well as by registers (Nsight Compute, H200, 13:51 UTC)
    if getattr(f, "preferred_shared_memory_carveout", None) is not None:
        f.preferred_shared_memory_carveout = 100
    return f, (total,), (threads,), shared, 1


def _chunk_tile(dt, n):
    """Default ``R``: enough multiply-adds per shared-memory load (``R^2`` per ``2 R``) without spills.

    ``ptxas -v`` (sm_90): float32 R = 8 uses 167 registers, R = 4 87; float64 R = 4 106;
    complex128 keeps R <= 2 (an R = 4 tile of complex128 is 64 registers of accumulators alone).
    """
    if n <= 2:
        R = 1
    elif n <= 8 or dt.itemsize >= 16:
        R = 2
    else:
        R = 8 if (n > 64 and dt.itemsize == 4) else 4
    top = 4 if dt.itemsize >= 16 else 8  # complex128 with R = 8: 256 registers of accumulators
    while R < top and -(-n // R) * ((n + R) // R) > 1024:  # a group is at most one block
        R *= 2
    return R


def _chunk_geometry(dt, n, R, D):
    """``(threads per group, shared bytes per group)`` of ``dense_chunk_products`` (as in dense.cu)."""
    size = dt.itemsize
    V = 1 if size >= 16 else 16 // size
    NR = -(-n // R)
    NP, NC = NR * R, (n + R) // R
    NPA = NP
    while NPA % (2 * V) != V:
        NPA += 1

    def ru(x):
        return -(-x // V) * V

    return NR * NC, (ru(D * NP * NPA) + ru(D * NP) + ru(NP * NC * R)) * size


@functools.cache
def _chunk_group(dt):
    Rs = _CHUNK_RS if dt.itemsize < 16 else _CHUNK_RS[:-1]
    return tuple(f"dense_chunk_products<{_TYPENAMES[dt]}, {R}, {D}>" for R in Rs for D in _CHUNK_DS)


def _product_plan(dt, n, total, R, D):
    """``(function, blocks, threads, shared bytes, G)`` of the products kernel, or None where it does not fit."""
    from ._common import get_function

    N = _chunk_mma_n(dt, n)
    if N is not None:
        return _mma_product_plan(N, total, D)
    optin, sms = _device_limits()
    R = R or _chunk_tile(dt, n)
    Ds = (D,) if D else (4, 3, 2)
    for d in Ds:
        NT, gbytes = _chunk_geometry(dt, n, R, d)
        if gbytes <= optin:
            break
    else:
        return None
    f = get_function("dense.cu", f"dense_chunk_products<{_TYPENAMES[dt]}, {R}, {d}>", group=_chunk_group(dt))
    # about 256 threads a block, but at least one block per SM while there is work for it
    G = max(1, min(256 // NT, optin // gbytes, total // sms if total >= sms else 1))
    while G > 1 and G * NT > f.max_threads_per_block:
        G -= 1
    if NT > f.max_threads_per_block:
        return None
    shared = G * gbytes
    _allow_shared(f, shared)
    return f, (-(-total // G),), (G * NT,), shared, G


_chunk_plans: dict = {}


def _chunk_plans_for(dt, n, NL, C, vec, aligned):
    """Plans of the three passes (products, carries, rerun), cached per shape; None where one does not fit."""
    key = (cupy.cuda.runtime.getDevice(), dt, n, NL, C, vec, aligned, CHUNK_MMA_WG_OPT, CHUNK_R, CHUNK_D, KERNEL,
           STAGES, EXCHANGE, ROW_BYTES, CHUNK_MMA, CHUNK_MMA_MINB, CHUNK_MMA_SPLIT, CHUNK_MMA_FRESH, CHUNK_MMA_WG,
           RERUN_STAGES, RERUN_ROW_BYTES)
    plans = _chunk_plans.get(key)
    if plans is None:
        m = _mapping(dt, n, aligned)
        if KERNEL == "auto":
            kinds = ("ring",) if m is None or m[0] else ("regs", "ring")
        else:
            kinds = {"ring": ("ring",), "regs": ("regs", "ring"), "bulk": ("ring",)}.get(KERNEL, ())

        def seq_plan(lanes, al, stages=None, row_bytes=None):
            for kind in kinds:
                p = _plan(dt, n, lanes, kind, al, *((stages, row_bytes) if kind == "regs" else ()))
                if p is not None:
                    return p
            return None

        prod = _product_plan(dt, n, NL * C, CHUNK_R, CHUNK_D)
        carry = seq_plan(NL, True)  # the work buffers are 256-byte aligned
        # The rerun has a lane per chunk. Where those outnumber the SMs, float32 blocks of
        # n > 32 (a block per lane) hold 2 steps in registers instead of 8, and a thread takes
        # 64 bytes of a row instead of 32 (half the threads): 3 blocks fit an SM instead of 1
        # (72 registers a thread instead of 114). At (8, 4096, 64), 392 lanes, on an H200: 133
        # against 185 us (2026-11-22 01:02 UTC; 2 steps alone: 164 us, 2 blocks per SM).
        many = dt == np.float32 and n > 32 and NL * C > _device_limits()[1]
        rerun = seq_plan(NL * C, aligned, *((RERUN_STAGES, RERUN_ROW_BYTES) if many else ()))
        plans = None if None in (prod, carry, rerun) else (prod, carry, rerun)
        _chunk_plans[key] = plans
    return plans


@functools.lru_cache(maxsize=256)
def _chunk_scalars(NL, C, L, T, n, a_lane, a_time, reverse, has_h0, G, vec, Pc, Pr, diag):
    """The scalar kernel arguments of the three passes (built once per shape: host time per call)."""
    i32, i64 = np.int32, np.int64
    rev, nn = i32(reverse), n * n
    products = (i64(a_lane), i64(a_time), i64(n), i32(has_h0), i32(NL), i32(C), i32(L), i32(T), i32(n), rev,
                i32(G), i32(vec))
    carries = (i64(C * nn), i64(nn), i32(0), i32(C), i32(n), rev, i32(NL), i32(Pc), i32(diag),
               i32(1), i64(0), i64(C * n), i32(C))
    rerun = (i64(a_lane), i64(a_time), i32(1), i32(L), i32(n), rev, i32(NL * C), i32(Pr), i32(diag),
             i32(C), i64(L * a_time), i64(T * n), i32(T))
    return products, carries, rerun


@functools.lru_cache(maxsize=64)
def _wave_slots(dev, N, D, wg, opt=None):
    """Blocks of the warpgroup products kernel (``CHUNK_MMA_WG`` = wg) resident on the device at once.

    ``opt``: ``CHUNK_MMA_WG_OPT``, which :func:`_mma_product_plan` reads; here only a cache key (an
    arrangement of the step may use other registers, hence fit other block counts)."""
    f, _, block, shared, _ = _mma_product_plan(N, 1, D)
    per_sm = cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(f.kernel.ptr, block[0], shared)
    return per_sm * cupy.cuda.Device(dev).attributes["MultiProcessorCount"]


def _whole_waves(dt, n, NL, T, L, C):
    """``(L, C)`` with as many chunks as fill whole waves of the warpgroup products kernel.

    Its blocks each run a chunk's ``L`` steps one after another, and only 3 fit on an SM, so a
    partial last wave costs nearly a whole one: at (8, 4096, 64) on an H200 the 512 blocks of
    ``L = 64`` took 336 us, the 392 of ``L = 84`` (one wave of 396) 293 us (2026-11-22 00:42 UTC).
    Fewer chunks also shorten the carries pass. Elsewhere ``(L, C)`` stay as they are.
    """
    N = _chunk_mma_n(dt, n)
    wg = N and _mma_wg(N)
    if not wg:
        return L, C
    slots = _wave_slots(cupy.cuda.runtime.getDevice(), N, CHUNK_D, wg, CHUNK_MMA_WG_OPT)
    waves = NL * C // slots
    if waves < 1:
        return L, C
    L2 = -(-T // max(CHUNK_MIN, waves * slots // NL))
    return L2, -(-T // L2)


def chunk_length(T):
    """The default chunk length of :func:`chunked` (``CHUNK_L`` when set)."""
    return CHUNK_L or max(4, round(CHUNK_FACTOR * T ** 0.5))


def chunk_shape(dt, n, NL, T):
    """``(L, C)``: the chunk length and count :func:`chunked` uses for ``NL`` lanes of ``T`` steps."""
    L = min(chunk_length(T), max(T, 1))
    C = -(-T // L) if T else 0
    if CHUNK_L is None and C >= CHUNK_MIN and NL:
        L, C = _whole_waves(dt, n, NL, T, L, C)
    return L, C


def chunked(A, b, h0, dt, reverse, out):
    """The dense scan in three kernel launches over chunks of ``L`` steps, into ``out``.

    1. ``dense_chunk_products``: for every (lane, chunk) at once, the chunk's
       transition product ``P_c = A[last] ... A[first]`` and its end state
       ``e_c`` from a zero entering state (``T n^3`` multiply-adds in all;
       float32 with ``9 <= n <= 64`` on sm_80+: ``dense_chunk_products_mma``,
       on tensor cores in 3xTF32, ``CHUNK_MMA``: 7.5e-8 relative error on
       mixed-sign data like the FMA products, 1.7e-6 on non-negative systems of
       spectral radius 0.99, 1.5e-5 at 0.999: docs/dense.md, "Full float32
       precision"; for ``32 < n <= 64`` on compute capability 9.0 on warpgroup
       MMAs in FP16 pieces, ``CHUNK_MMA_WG``: 3.8e-6 and 3.4e-5, with as many
       chunks as fill whole waves of its blocks, :func:`chunk_shape`);
    2. the sequential kernel over the ``C`` chunks of each lane carries the
       entering states ``s_c = P_{c-1} s_{c-1} + e_{c-1}`` (``s_0`` = the
       initial state), ``C`` dependent steps;
    3. the sequential kernel on ``lanes x C`` lanes of ``L`` steps reruns
       every chunk from its entering state, writing ``h``.

    Blelloch's two-level scan (1990, "Prefix sums and their applications",
    CMU-CS-90-190) on the affine maps ``h -> A h + b``: the critical path is
    about ``L + C`` steps instead of ``T``. ``A`` is never expanded along time
    or over lanes that share it. Like cyclic reduction it multiplies ``A``
    over a chunk: where those products overflow it returns NaN where the loop
    may still be finite (docs/dense.md). Falls back to :func:`sequential`
    with fewer than ``CHUNK_MIN`` chunks or where a pass's kernel does not fit.
    Returns what a call bound to this signature repeats (:func:`_owned`), or None.
    """
    dt = np.dtype(dt)
    lanes = b.shape[:-2]
    T, n = b.shape[-2], b.shape[-1]
    NL = 1
    for s in lanes:
        NL *= s
    L, C = chunk_shape(dt, n, NL, T)
    if C < CHUNK_MIN or NL == 0 or KERNEL not in ("auto", "ring", "regs", "bulk"):
        return sequential(A, b, h0, dt, reverse, out)
    Ac = _dense.compact(A)
    TA = Ac.shape[-3]
    if all(s == 1 for s in Ac.shape[:-3]):
        A2 = Ac.reshape(TA, n, n)
        a_lane = 0
    else:
        A2 = cupy.broadcast_to(Ac, lanes + (TA, n, n))  # only lane axes; time stays TA
        a_lane = TA * n * n
    if not A2.flags.c_contiguous or A2.dtype != dt:
        A2 = cupy.ascontiguousarray(A2, dtype=dt)
    a_time = 0 if TA == 1 else n * n
    B2 = b if (b.dtype == dt and b.flags.c_contiguous) else cupy.ascontiguousarray(b, dtype=dt)
    if B2.data.ptr % dt.itemsize:
        return sequential(A, b, h0, dt, reverse, out)
    aligned = A2.data.ptr % 16 == 0
    V = 1 if dt.itemsize >= 16 else 16 // dt.itemsize
    vec = aligned and n % V == 0
    plans = _chunk_plans_for(dt, n, NL, C, vec, aligned)
    if plans is None:
        return sequential(A, b, h0, dt, reverse, out)
    (fp, gp, bp, sp, G), (fc, gc, bc, sc, Pc), (fr, gr, br, sr, Pr) = plans
    direct = out.dtype == dt and out.flags.c_contiguous
    H = out if direct else cupy.empty(b.shape, dt)
    if h0 is not None:
        h2 = h0 if (h0.dtype == dt and h0.flags.c_contiguous and h0.shape == lanes + (n,)) else \
            cupy.ascontiguousarray(cupy.broadcast_to(h0, lanes + (n,)), dtype=dt)
    else:
        h2 = None
    sp_, sc_, sr_ = _chunk_scalars(NL, C, L, T, n, a_lane, a_time, bool(reverse), h0 is not None, G, vec, Pc, Pr,
                                   DIAG)
    # scratch: the chunk products P, end states E and entering states S
    nn, size = n * n, dt.itemsize
    Pw, Ew, Sw = _work(0), _work(NL * C * nn * size), _work(NL * C * (nn + n) * size)
    launches = _Launches([
        (fp, gp[0], bp[0], sp, (_A, sp_[0], sp_[1], _B, _H0) + sp_[2:4] + (Pw, Ew) + sp_[4:]),
        # entering states: a plain sequential scan over the chunk slots (zero initial state)
        (fc, gc[0], bc[0], sc, (Pw, sc_[0], sc_[1], Ew, Sw, Sw) + sc_[2:]),
        # every chunk again from its entering state: lanes x C lanes of L steps (the last may be short)
        (fr, gr[0], br[0], sr, (_A, sr_[0], sr_[1], _B, _OUT, Sw) + sr_[2:]),
    ], work=NL * C * (nn + 2 * n) * size, phases=True)
    return _owned(launches, A, b, h0, out, A2, B2, H, h2)


# --------------------------------------------------------------------------- lookback


#: Chunk length ``L`` and warps per block ``W`` of :func:`lookback`; None: :func:`lookback_shape`.
LOOKBACK_L = None
LOOKBACK_W = None
_LB_WS = (1, 2, 4, 8)
#: Steps of ``A`` each product group keeps in flight in its shared-memory ring (1, 2, 4 or 8, else
#: rounded down); None: 8 with tensor-core maps, else 4 (at most the sub-chunk's length). Benchmarks only.
LOOKBACK_RING = None
#: Predecessor maps the look-back keeps in flight (``LB_DEPTH``, float32 n <= 16); None: the
#: kernel's default (4). Another value compiles another module. Benchmarks only.
LOOKBACK_DEPTH = None
#: Benchmarks only: a CuPy int64 array of 10 per tile (phase timestamps, look-back depth, SM) or None.
LOOKBACK_DIAG = None
#: Chunk maps of float32 at N = 16 on tensor cores with three TF32 products per multiply
#: (float32 accuracy; ``lb_map_mma`` in dense_lookback.cu); False: the float32 FMA products.
LOOKBACK_MMA = True
#: Resident warps per SM the kernel's registers must allow (``LB_MINW``; another module); None:
#: the compiler's choice. Benchmarks only.
LOOKBACK_MINW = None
#: The tensor-core maps' operand split (``SA_TF32_SPLIT``, cuda/tf32x3.cuh): None the default (2:
#: both pieces rounded by integer operations), 1 the same values by ``cvt.rna``, 0 ONE TF32 product
#: per multiply (TF32 accuracy, not float32: a benchmark of what the 3xTF32 split costs, never for
#: results). Benchmarks only.
LOOKBACK_SPLIT = None
#: Benchmarks only: 0 sums the tensor-core maps' main products in one accumulation chain per tile
#: (``LB_MMA_FRESH``; the default 1 sums them per k-tile in float32, dense_lookback.cu).
LOOKBACK_FRESH = None
#: n (padded to N, a power of two >= 4) up to which :func:`lookback` runs; complex128 up to 16
#: (an N = 32 register tile of complex128 spills); larger n go to :func:`chunked`.
LOOKBACK_MAX_N = 32
#: How a chunk of :func:`lookback` gets its place in the scan. True: a ticket from the
#: workspace's atomic counter, which does not rely on the order in which blocks start. False: its
#: block's index, as the diagonal scan's tiles do (``_config.CUPY_TILE_TICKETS``), which saves the
#: counter's round trip but gained nothing overall here. GPU time of queued calls, median of 7
#: bursts of 50, three alternating rounds (H200, 2026-11-28 16:43 UTC,
#: ``benchmarks/diag_dense_tiles.py``; bit for bit the same results): block index 56.3 against
#: 57.0-57.1 µs at (64, 1024, 16) float32, but 42.6-42.7 against 42.1 at (8, 4096, 16) and
#: 317.2-317.4 against 310.7-311.2 at (16, 2048, 32); equal at (256, 256, 8) and float64 (64, 1024, 16).
LOOKBACK_TICKETS = True


def _lb_pad(dt, n):
    """``N`` of the lookback kernel for ``n``, or None where it does not apply."""
    N = max(4, 1 << max(0, (n - 1).bit_length()))
    top = 16 if dt.itemsize >= 16 else LOOKBACK_MAX_N
    return N if N <= top else None


def _lb_mma(dt, N):
    """Whether the chunk maps run on tensor cores (3xTF32, ``lb_map_mma``): float32 at N = 16, sm_80+."""
    if not LOOKBACK_MMA or dt != np.float32 or N != 16:
        return False
    return int(cupy.cuda.Device().compute_capability) >= 80


def _lb_groups(dt, N, W):
    """Sub-chunks per block: a product per 16 threads for N <= 16, per warp for N = 32 or on
    tensor cores (the kernel's ``GT``)."""
    return W * (2 if N <= 16 and not _lb_mma(dt, N) else 1)


def _lb_ring(dt, N, L, W, inv):
    """Ring slots of ``A`` per product group: ``LOOKBACK_RING``, else 8 for tensor-core maps (a step
    takes a fraction of a DRAM round trip there) and 4 for FMA ones; at most a sub-chunk's steps."""
    if inv:
        return 1  # one staged matrix, no ring
    NG = _lb_groups(dt, N, W)
    r = max(1, min(LOOKBACK_RING or (8 if _lb_mma(dt, N) else 4), 8, -(-L // NG)))
    return 1 << (r.bit_length() - 1)  # a power of two (the kernel masks ring positions)


def _lb_smem(dt, N, L, W, inv):
    """Dynamic shared memory bytes of ``dense_lookback`` (the layout in dense_lookback.cu)."""
    V = max(1, 16 // dt.itemsize)
    MT = (N + 1) * (N + V)
    NG = _lb_groups(dt, N, W)
    slots = 1 if inv else NG * _lb_ring(dt, N, L, W, inv)
    return (slots * N * N + L * N + (NG + 2) * MT + NG * 2 * N) * dt.itemsize


def lookback_shape(dt, n, T, inv=False):
    """``(L, W)`` of :func:`lookback` for ``T`` steps: ``LOOKBACK_L``/``LOOKBACK_W`` when set.

    Default: chunks of a power of two steps <= ``sqrt(T)`` (at least 8), a sub-chunk of 8 steps
    per product group (16 threads for n <= 16, a warp above; 1 to 4 warps); with tensor-core
    maps (float32, n 9-16) chunks twice as long and a warp per 32 steps. Halved until the
    block's shared memory fits a quarter of the opt-in limit (several blocks per SM hide each
    other's latency); None where even 4 steps do not fit.
    """
    dt = np.dtype(dt)
    N = _lb_pad(dt, n)
    if N is None:
        return None
    optin, _ = _device_limits()
    mma = _lb_mma(dt, N)
    per_warp = _lb_groups(dt, N, 1)

    def warps(L):
        if LOOKBACK_W:
            return LOOKBACK_W
        if mma:  # tensor-core maps: a warp per 32 steps
            return min(4, max(1, L // 32))
        return min(4, max(1, L // 8 // per_warp))

    # (tensor-core maps: twice as long)
    L = LOOKBACK_L or max(8, (2 if mma else 1) << ((max(T, 2) - 1).bit_length() // 2))
    W = warps(L)
    budget = optin if LOOKBACK_L else max(optin // 4, 48 * 1024)
    while L > 4 and _lb_smem(dt, N, L, W, inv) > budget:
        L //= 2
        W = warps(L)
    if _lb_smem(dt, N, L, W, inv) > optin:
        return None
    return L, W


@functools.cache
def _lb_group(dt):
    Ns = [N for N in (4, 8, 16, 32) if _lb_pad(dt, N) == N]
    return tuple(f"dense_lookback<{_TYPENAMES[dt]}, {N}, {W}>" for N in Ns for W in _LB_WS)


def _lb_function(dt, N, W, smem):
    from ._common import get_function

    opts = _tile_options(LOOKBACK_TICKETS)
    if LOOKBACK_DEPTH is not None:
        opts += (f"-DLB_DEPTH={int(LOOKBACK_DEPTH)}",)
    if _lb_mma(dt, N):
        opts += ("-DLB_MMA=1",)
    if LOOKBACK_MINW:
        opts += (f"-DLB_MINW={int(LOOKBACK_MINW)}",)
    if LOOKBACK_SPLIT is not None:
        opts += (f"-DSA_TF32_SPLIT={int(LOOKBACK_SPLIT)}",)
    if LOOKBACK_FRESH is not None:
        opts += (f"-DLB_MMA_FRESH={int(LOOKBACK_FRESH)}",)
    f = get_function("dense_lookback.cu", f"dense_lookback<{_TYPENAMES[dt]}, {N}, {W}>", opts, group=_lb_group(dt))
    _allow_shared(f, smem)
    return f


def lookback(A, b, h0, dt, reverse, out):
    """The dense scan in ONE kernel launch: chunk products and a decoupled look-back.

    A block per (lane, chunk of ``L`` steps) stages the chunk's ``b[t]`` in
    shared memory and streams its ``A[t]`` through a ring of a few steps per
    product group (``cp.async``; read again for the rerun, from L2), so about
    twice as many blocks are resident as with the whole chunk of ``A`` staged;
    it computes the chunk's affine map ``(P_c, e_c)``
    (``P_c`` the product of its ``A[t]``, ``e_c`` its end state from zero:
    groups of 16 threads (a warp for ``n > 16``) on sub-chunks, then composed;
    float32 with ``n`` 9-16 on tensor cores, a warp per sub-chunk, three TF32
    products per multiply, ``LOOKBACK_MMA``: 7e-8 relative error on mixed-sign
    data like the FMA products, but the tensor core's accumulation rounds toward
    zero, which on non-negative systems near spectral radius 1 adds up to
    1.9e-6 (radius 0.99) or 8.7e-6 (0.999): docs/dense.md, "Full float32 precision"),
    publishes it, finds its entering
    state by a decoupled look-back over its predecessors' published maps and
    states (Merrill & Garland 2016, NVR-2016-002; matvecs only), publishes its
    end state and reruns its steps, writing ``h``: ``A`` is read twice (the
    second time from L2), ``T n^3`` multiply-adds, one launch. Tile statuses live in the
    diagonal scan's workspace (``_cupy_scan._workspace``: epochs, no memset per
    call). A chunk whose map or states are non-finite publishes no map and
    replays its steps exactly (the loop), so NaN/inf appear where the loop puts
    them given the entering state. ``n`` up to 32 (complex128: 16); larger
    ``n`` go to :func:`chunked`. Results do not depend on timing: every
    entering state is computed by the same function whichever predecessor's
    state the look-back found. Returns what a call bound to this signature
    repeats (:func:`_owned`), or None.
    """
    dt = np.dtype(dt)
    key = (A.shape, A.strides, A.dtype, b.shape, dt, bool(reverse), LOOKBACK_L, LOOKBACK_W,
           cupy.cuda.runtime.getDevice(), LOOKBACK_RING, LOOKBACK_DEPTH, LOOKBACK_MMA, LOOKBACK_MINW, LOOKBACK_SPLIT,
           LOOKBACK_FRESH, LOOKBACK_TICKETS)
    plan = _lb_plans.get(key)
    if plan is None:
        if len(_lb_plans) > 1024:
            _lb_plans.clear()
        plan = _lb_plans[key] = _lb_plan(A, b, dt, reverse)
    if plan is False:
        return chunked(A, b, h0, dt, reverse, out)
    f, smem, grid, threads, full_a, a_lane, inv, rec, N, C, _L, tail = plan
    lanes, n = b.shape[:-2], b.shape[-1]
    if grid == 0:
        return None
    if full_a:  # A materialised over lanes and time, contiguous: read as it is
        A2 = A
    else:
        Ac = _dense.compact(A)
        A2 = Ac.reshape(Ac.shape[-3:]) if a_lane == 0 else cupy.broadcast_to(Ac, lanes + Ac.shape[-3:])
        if not A2.flags.c_contiguous or A2.dtype != dt:
            A2 = cupy.ascontiguousarray(A2, dtype=dt)
    B2 = b if (b.dtype == dt and b.flags.c_contiguous) else cupy.ascontiguousarray(b, dtype=dt)
    direct = out.dtype == dt and out.flags.c_contiguous
    H = out if direct else cupy.empty(b.shape, dt)
    size = dt.itemsize
    pa, pb, ph = A2.data.ptr, B2.data.ptr, H.data.ptr
    if pa % size or pb % size or ph % size:
        return chunked(A, b, h0, dt, reverse, out)
    fast = _ONE if (n == N and (pa | pb | ph) % 16 == 0) else _ZERO
    if h0 is not None:
        h2 = h0 if (h0.dtype == dt and h0.flags.c_contiguous and h0.shape == lanes + (n,)) else \
            cupy.ascontiguousarray(cupy.broadcast_to(h0, lanes + (n,)), dtype=dt)
    else:
        h2 = None
    head = (_A, a_lane, inv, _B, _OUT, _H0, _ONE if h0 is not None else _ZERO) + tail
    extra = (_NULL if LOOKBACK_DIAG is None else LOOKBACK_DIAG,)
    if C > 1:  # statuses in the diagonal scan's workspace
        step = (f, grid, threads, smem, head + (fast, _WS, _WS_COUNTER, _WS_EPOCH, rec[1]) + extra)
        launches = _Launches([step], ws=(rec[0], grid))
    else:
        launches = _Launches([(f, grid, threads, smem, head + (fast, _B, np.uint64(0), np.uint32(0), rec[1]) + extra)])
    return _owned(launches, A, b, h0, out, A2, B2, H, h2)


_ONE, _ZERO = np.int32(1), np.int32(0)
_NULL = np.uint64(0)  # a null pointer argument
_lb_plans: dict = {}
_launchers: dict = {}


def _launch(f, grid, threads, args, smem):
    """Launch ``f`` through one packed parameter buffer (``_cupy_common.PackedLauncher``: about 5 µs
    of host time less than CuPy's call), CuPy's call where that does not apply or for diagnostics
    (device pointers are Python ints)."""
    packed = _launchers.get(f) if (LOOKBACK_DIAG is None and _common.PACKED_LAUNCH) else False
    if packed is None:
        packed = _launchers[f] = _common.PackedLauncher.create(f, args) or False
    if packed:
        packed.launch(cupy, grid, threads, args, smem)
    else:
        f((grid,), (threads,), _common.raw_args(args), shared_mem=smem)


def _lb_plan(A, b, dt, reverse):
    """What :func:`lookback` launches for these shapes (cached: host time per call), or False: chunked."""
    lanes = b.shape[:-2]
    T, n = b.shape[-2], b.shape[-1]
    NL = 1
    for s in lanes:
        NL *= s
    zero = 0 in A.strides[:-2]
    full_a = A.shape[:-3] == lanes and A.flags.c_contiguous and A.dtype == dt and not zero and T > 1
    Ac = _dense.compact(A)
    TA = Ac.shape[-3]
    inv = TA == 1
    shape = lookback_shape(dt, n, T, inv)
    if shape is None:
        return False
    L, W = shape
    N = _lb_pad(dt, n)
    a_lane = TA * n * n if (full_a or not all(s == 1 for s in Ac.shape[:-3])) else 0
    C = -(-T // L) if T else 0
    grid = NL * C
    if grid >= 2**31:
        return False
    smem = _lb_smem(dt, N, L, W, inv)
    f = _lb_function(dt, N, W, smem) if grid else None
    rec = 16 + -(-(N + 2) * N * dt.itemsize // 16) * 16
    ring = _lb_ring(dt, N, L, W, inv)
    tail = (np.int32(T), np.int32(n), np.int32(L), np.int32(C), np.int32(bool(reverse)), np.int32(ring))
    return (f, smem, grid, 32 * W, full_a, np.int64(a_lane), np.int32(inv), (rec, np.int64(rec)), N, C, L, tail)


_settings.track(__name__)  # its tunables count as changes for bound calls (_config.generation)
