"""Dense methods of the CuPy backend: ``h[t] = A[t] @ h[t-1] + b[t]`` on the GPU (docs/guide/dense.md).

``cyclic_reduction`` and ``prefix`` run the array-generic algorithms of :mod:`scanarray._dense`
on CuPy: every level is one batched ``cupy.matmul`` (cuBLAS), in full float32 precision
(:func:`full_precision`). The other methods are CUDA kernels (``cuda/dense.cu``,
``cuda/dense_lookback.cu``):

- ``sequential``: one kernel stepping through time. Its critical path per step is latency,
  not work (``T n^2`` multiply-adds in all), so the kernels keep ``A[t]`` several steps in
  flight and split each row over ``P`` adjacent threads: a warp per lane for ``n <= 32`` (at
  most 128 bytes of a row a thread), else a block per lane; ``A`` through a ring of ``D``
  shared-memory stages (``ring``) or held ``D`` steps ahead in registers (``regs``, the
  default with a block per lane); where neither fits (``n`` above about 128 in double
  precision) the first kernels: ``A[t]`` staged in shared memory (``staged``) or read
  straight from global memory (``direct``, any ``n`` up to 1024).
- ``chunked``: chunks of about ``sqrt(T)`` steps in three launches: every chunk's transition
  product and end state at once (float32 on tensor cores in 3xTF32; for ``32 < n <= 64`` on
  compute capability 9.0 on warpgroup MMAs in FP16 pieces), the carries over chunks, the
  rerun of every chunk (both the sequential kernels, on reshaped lanes).
- ``lookback`` (n <= 32): the same chunk products and a decoupled look-back over the chunks'
  published maps, in one launch (Merrill & Garland 2016).

Every kernel method takes keyword arguments that choose its shapes (tests and benchmarks pass
them; the defaults are what ``method`` runs); defaults come from :data:`.tuning.TUNING`.
"""

from __future__ import annotations

import contextlib
import functools

import cupy
import numpy as np

from ... import _dense, _dtypes
from . import _common
from ._common import Binder
from .scan import _workspace_at
from .tuning import TUNING

__all__ = ["chunked", "full_precision", "linear_recurrence", "lookback", "sequential"]

# cublasMath_t values (cublas_api.h); the low bits select the mode, higher bits are flags such as
# CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION.
_TENSOR_OP_MATH = 1  # deprecated, allows down-conversion on tensor cores
_TF32_TENSOR_OP_MATH = 3
_MODE_MASK = 0xF


@contextlib.contextmanager
def full_precision():
    """Within the block, cuBLAS computes CuPy's batched float32/complex64 products in full FP32.

    cuBLAS may compute float32 products with TF32 tensor cores (10 mantissa bits: about 1e-3
    relative error per product, beyond what a scan of ``log2 T`` levels can absorb). CuPy issues
    products of more than two dimensions as strided-batched GEMMs with a legacy compute type,
    which follow the handle's math mode (cupy/cupy#3602): this clears a TF32 (or tensor-op)
    mode on the current device's handle, set by other code sharing it, and restores it on exit.
    Two-dimensional products follow CuPy's own TF32 setting (``CUPY_TF32``), which no public
    API changes: the dense methods issue none (:data:`_BATCHED`).
    """
    handle = cupy.cuda.device.get_cublas_handle()
    cublas = cupy.cuda.cublas
    old = cublas.getMathMode(handle)
    tf32 = (old & _MODE_MASK) in (_TENSOR_OP_MATH, _TF32_TENSOR_OP_MATH)
    if tf32:
        cublas.setMathMode(handle, old & ~_MODE_MASK)  # CUBLAS_DEFAULT_MATH + the same flags
    try:
        yield
    finally:
        if tf32:
            cublas.setMathMode(handle, old)


class _BatchedCupy:
    """CuPy for :mod:`scanarray._dense`, with every matrix product batched (see :func:`full_precision`)."""

    __name__ = "cupy"

    def __getattr__(self, name):
        return getattr(cupy, name)

    @staticmethod
    def matmul(x, y, out=None):
        if x.ndim == 2 and y.ndim == 2:
            r = cupy.matmul(x[None], y[None], out=None if out is None else out[None])
            return r[0] if out is None else out
        return cupy.matmul(x, y) if out is None else cupy.matmul(x, y, out=out)


_BATCHED = _BatchedCupy()


def linear_recurrence(p, **options):
    """Compute the dense problem ``p`` (a :class:`scanarray._problem.Problem`) into ``p.out``;
    ``options``: the keyword arguments of the method's function (:func:`sequential`, ...)."""
    kernel = {"sequential": sequential, "chunked": chunked, "lookback": lookback}.get(p.method)
    if kernel is not None:
        done = kernel(p.a, p.b, p.initial, p.dtype, p.reverse, p.out, **options)
        dev = cupy.cuda.runtime.getDevice()
        if done is not None and p.b.data.device_id == dev:
            # launches on the caller's own memory: a repeated call can go straight to them
            p.bind = Binder(done[0], dev, *done[1:])
        return p.out
    with full_precision():
        h = _dense.METHODS[p.method](_BATCHED, p.a, p.b, p.initial, p.dtype, reverse=p.reverse, out=p.out)
    if h is not p.out:  # out of another dtype (half precision storage): one casting copy
        p.out[...] = h
    return p.out


def _name(kernel, *params):
    """The C++ name of an instantiation: ``scanarray::kernel<params>`` (dtypes as the table names them)."""
    args = ", ".join(_dtypes.ctype(x) if isinstance(x, np.dtype) else
                     ("true" if x else "false") if isinstance(x, bool) else str(x) for x in params)
    return f"scanarray::{kernel}<{args}>"


@functools.lru_cache(maxsize=None)
def _device_limits(dev):
    """(opt-in shared memory per block, multiprocessor count, compute capability) of device ``dev``."""
    props = cupy.cuda.runtime.getDeviceProperties(dev)
    cc = int(cupy.cuda.Device(dev).compute_capability)
    return int(props.get("sharedMemPerBlockOptin", 48 * 1024)), int(props["multiProcessorCount"]), cc


def _limits():
    return _device_limits(cupy.cuda.runtime.getDevice())


def _allow_shared(f, shared):
    """Let ``f`` take ``shared`` bytes of dynamic shared memory (opt-in above 48 KiB). Never lowers
    the limit: plans of other shapes share the compiled function, and a launch above it fails with
    CUDA_ERROR_INVALID_VALUE."""
    if shared > 48 * 1024 and f.max_dynamic_shared_size_bytes < shared:
        f.max_dynamic_shared_size_bytes = shared


def _round32(x):
    return max(32, -(-x // 32) * 32)


def _pow2_floor(x):
    return 1 << (max(1, x).bit_length() - 1)


# --------------------------------------------------------------------------- launches


class _Role:
    """An argument of a planned launch that each call fills in (see :class:`_Launches`): value
    ``slot`` of the call's list, plus ``offset``; ``cast`` gives it its parameter's type where CuPy's
    own launch call (or the first packed launch, whose argument types fix the layout) needs one."""

    __slots__ = ("cast", "offset", "slot")

    def __init__(self, slot, offset=0, cast=None):
        self.slot, self.offset, self.cast = slot, offset, cast


_A, _B, _OUT, _H0 = _Role(0), _Role(1), _Role(2), _Role(3)
_WS, _WS_EPOCH = _Role(5), _Role(6, cast=np.uint32)


def _work(offset):
    """The argument ``offset`` bytes into the call's scratch buffer."""
    return _Role(4, offset)


class _Launches:
    """A dense call's kernel launches on device pointers: the full path's, and those of calls bound
    to its signature (:class:`._common.Binder`).

    ``steps`` holds ``(function, blocks, threads, shared bytes, arguments)`` per launch, where an
    argument may be a role that each call fills in: ``_A``, ``_B``, ``_OUT`` (the canonical views'
    device pointers), ``_H0`` (the initial state's; without one ``b``'s, which the kernels then
    never read), ``_work(offset)`` (into a scratch buffer of ``work`` bytes, allocated per call
    from CuPy's pool on the current stream) and ``_WS``, ``_WS_EPOCH`` (the look-back workspace of
    ``ws = (status bytes, slots)``).
    """

    def __init__(self, steps, work=0, ws=None):
        self.steps = [(f, int(blocks), int(threads), shared, list(args),
                       tuple((i, r.slot, r.offset, r.cast) for i, r in enumerate(args) if isinstance(r, _Role)))
                      for f, blocks, threads, shared, args in steps]
        self.work, self.ws = work, ws

    def _call(self, stream_ptr, pa, pb, po, ph0, dev, run):
        """Fill one call's values of the roles and ``run(stream_ptr, vals)``: the operands, the
        scratch buffer (from CuPy's pool on this stream; back to the pool at return, where later
        work is ordered after these launches) and the stream's look-back workspace."""
        vals = [pa, pb, po, pb if ph0 is None else ph0, 0, 0, 0]
        if self.work:
            scratch = cupy.empty(self.work, np.uint8)
            vals[4] = scratch.data.ptr
        if self.ws is None:
            run(stream_ptr, vals)
            return
        ws = _workspace_at(dev, stream_ptr, *self.ws)
        with ws.launching():
            vals[5:] = ws.ptr, ws.epoch
            run(stream_ptr, vals)

    def direct(self, dev):
        """For bound calls: ``go(stream_ptr, pa, pb, po, ph0)`` doing what :meth:`launch_ptrs` does,
        with each launch's arguments packed once and only the roles packed per call; None where a
        launch is not packed."""
        gos = []
        for f, blocks, threads, shared, template, roles in self.steps:
            packed = _common.launcher(f)
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
        for f, blocks, threads, shared, template, roles in self.steps:
            args = template.copy()
            for i, slot, offset, cast in roles:
                v = vals[slot] + offset
                args[i] = v if cast is None else cast(v)
            _common.launch(cupy, f, blocks, threads, args, shared)


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


def _a_operand(A, dt, lanes, n):
    """``(A2, a_lane, a_time)``: ``A`` compact over lanes that share it and over time where it is
    time-invariant, contiguous in ``dt``, and its strides in elements over lanes and time."""
    Ac = _dense.compact(A)
    TA = Ac.shape[-3]
    if all(s == 1 for s in Ac.shape[:-3]):
        A2, a_lane = Ac.reshape(TA, n, n), 0
    else:
        A2, a_lane = cupy.broadcast_to(Ac, lanes + (TA, n, n)), TA * n * n  # only lane axes; time stays TA
    if not A2.flags.c_contiguous or A2.dtype != dt:
        A2 = cupy.ascontiguousarray(A2, dtype=dt)
    return A2, a_lane, 0 if TA == 1 else n * n


def _b_operands(b, h0, dt, out, lanes, n):
    """``(B2, H, h2)``: ``b`` and the initial state contiguous in ``dt``, and where to write ``h``
    (``out`` itself where it is contiguous in ``dt``)."""
    B2 = b if (b.dtype == dt and b.flags.c_contiguous) else cupy.ascontiguousarray(b, dtype=dt)
    H = out if (out.dtype == dt and out.flags.c_contiguous) else cupy.empty(b.shape, dt)
    h2 = None
    if h0 is not None:
        h2 = h0 if (h0.dtype == dt and h0.flags.c_contiguous and h0.shape == lanes + (n,)) else \
            cupy.ascontiguousarray(cupy.broadcast_to(h0, lanes + (n,)), dtype=dt)
    return B2, H, h2


# --------------------------------------------------------------------------- sequential kernels

#: registers per thread for prefetching A[t+1] in the staged kernel
_KS = (1, 2, 4, 8, 16, 32, 64)
#: shared memory the staged kernel may ask for (opt-in above 48 KiB; sm_80+ allow more than 160 KiB)
_MAX_SHARED = 160 * 1024
_KO = 32  # DENSE_KO in dense.cu
_RING_D = (2, 3, 4, 6, 8, 12, 16)
_REGS_D = (2, 4, 8, 16)
#: the compute dtypes (the table's accumulation dtypes): other storage is cast to them
_DTS = tuple(dict.fromkeys(np.dtype(row.accumulate) for row in _dtypes.DTYPES.values()))


@functools.cache
def _first_group():
    """The first kernels (staged, direct) of every dtype: one NVRTC call."""
    return tuple(_name("dense_sequential_direct", dt) for dt in _DTS) + \
        tuple(_name("dense_sequential_staged", dt, k) for dt in _DTS for k in _KS)


def _first_kernel(dt, n, kernel):
    """``(function, threads, shared bytes)``: the staged kernel when its tiles fit (and ``kernel`` is
    not "direct"), else the direct one.

    The staged kernel prefetches ``K`` elements of ``A[t+1]`` per thread; ``K`` is capped at 256
    bytes of registers per thread (more spills, measured with ``ptxas -v`` for sm_90), so large
    ``n`` take more threads than rows.
    """
    shared = (2 * n * (n + 1) + 2 * n) * dt.itemsize
    base = max(32, n, -(-n * n // (256 // dt.itemsize)))
    threads = -(-base // n) * n  # a multiple of n: the kernel maps elements to rows without division
    K = next((k for k in _KS if k * threads >= n * n), None)
    if kernel != "direct" and threads <= 1024 and K is not None and shared <= _MAX_SHARED:
        f = _common.get_function("dense.cu", _name("dense_sequential_staged", dt, K), group=_first_group())
        _allow_shared(f, shared)
        return f, threads, shared
    threads = _round32(n)
    if threads > 1024:
        raise ValueError(f"method='sequential' on CuPy supports n <= 1024; got n = {n}")
    f = _common.get_function("dense.cu", _name("dense_sequential_direct", dt), group=_first_group())
    return f, threads, 2 * n * dt.itemsize


def _mapping(dt, n, aligned=True, row_bytes=None):
    """``(warp, P, C, N2, U, G)`` of the latency-bound kernels (see dense.cu), or None.

    ``P`` threads share a row, each with ``C`` columns, ``P * C = N2`` (the next power of two
    >= n). A warp per lane while a thread's ``C`` elements take at most 128 bytes (n <= 32 in
    float32); else a block of ``G`` threads with ``row_bytes`` of a row per thread (default
    ``TUNING["dense_block_columns"]`` columns, at most 64 bytes), more if ``G`` would pass 1024.
    ``U``: elements per copy, 16 bytes where rows are 16-byte aligned.
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
    C = min(N2, max(1, (row_bytes or min(TUNING["dense_block_columns"] * size, 64)) // size))
    P = N2 // C
    while _round32(n * P) > 1024 and C < 32:
        C *= 2
        P = N2 // C
    G = _round32(n * P)
    if G > 1024:
        return None
    U = Uv if (aligned and n % Uv == 0 and C % Uv == 0) else 1
    return False, P, C, N2, U, G


def _shape(dt, n, L, kind, limits, aligned=True, stages=None, row_bytes=None):
    """``(name, lanes per block, threads, shared bytes, P)`` of kernel ``kind``, or None.

    ``kind`` "ring": ``A`` through ``D`` shared-memory stages (per block at most 64 KiB with a
    warp per lane, the opt-in limit with a block per lane); "regs": ``D`` steps of a thread's
    ``C`` elements in registers, at most 512 bytes (128 registers). ``D`` is the largest that
    fits unless ``stages``. The state goes through shared memory, with a block per lane the
    outputs too (``dense_state_elems`` in dense.cu).
    """
    m = _mapping(dt, n, aligned, row_bytes)
    if m is None:
        return None
    warp, P, C, N2, U, G = m
    size = dt.itemsize
    optin, sms, _ = limits
    lpb = 1 if (not warp or L <= sms) else 4  # few lanes: one per SM; many: 4 warps per block
    NB = G * lpb
    h_bytes = lpb * (2 * N2 if warp else 2 * N2 + 2 * _KO * N2) * size
    if kind == "ring":
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
    return _name(f"dense_sequential_{kind}", dt, C, U, D, warp), lpb, NB, D * stage + h_bytes, P


@functools.lru_cache(maxsize=None)
def _group(dt, kind, limits):
    """Every instantiation ``kind`` can use for ``dt`` by default: compiled in one NVRTC call."""
    names = set()
    for n in range(1, 129):
        # the chunked rerun's shape with more lanes than SMs too (float32, n > 32)
        shapes = [(None, None)] + ([(TUNING["dense_rerun_stages"], TUNING["dense_rerun_row_bytes"])]
                                   if kind == "regs" and dt == np.float32 and n > 32 else [])
        for L in (1, 1 << 20):
            for aligned in (True, False):
                for stages, row_bytes in shapes:
                    c = _shape(dt, n, L, kind, limits, aligned, stages, row_bytes)
                    if c is not None:
                        names.add(c[0])
    return tuple(sorted(names))


def _plan(dt, n, L, kind, aligned, stages=None, row_bytes=None):
    """``(function, grid, block, shared bytes, P)`` of kernel ``kind`` ("ring"/"regs"), or None."""
    limits = _limits()
    c = _shape(dt, n, L, kind, limits, aligned, stages, row_bytes)
    if c is None:
        return None
    name, lpb, NB, shared, P = c
    group = _group(dt, kind, limits)
    f = _common.get_function("dense.cu", name, group=group if name in group else ())
    if f.max_threads_per_block < NB:  # too many registers for this block size
        return None
    _allow_shared(f, shared)
    return f, (-(-L // lpb),), (NB,), shared, P


def _kinds(dt, n, aligned, kernel):
    """The latency-bound kernels to try, in order: a warp per lane takes "ring", a block per lane
    "regs" (which holds A in registers) before "ring"; ``kernel`` forces one (falling back to ring)."""
    if kernel == "auto":
        m = _mapping(dt, n, aligned)
        return ("ring",) if m is None or m[0] else ("regs", "ring")
    return {"ring": ("ring",), "regs": ("regs", "ring")}.get(kernel, ())


def sequential(A, b, h0, dt, reverse, out, *, kernel="auto", stages=None, row_bytes=None):
    """The sequential dense scan in one kernel launch into ``out`` (the canonical view).

    ``A`` is never expanded along time (a time-invariant ``A`` is read with time stride 0) nor
    across lanes when it is shared by all of them; an ``A`` broadcast over only some lane axes is
    expanded over those. ``kernel``: "auto", or "ring", "regs", "staged", "direct" (one that does
    not apply falls back); ``stages``, ``row_bytes``: ``D`` and a thread's bytes of a row of the
    ring/regs kernels. Returns what a call bound to this signature repeats, ``(launches, pa, pb,
    po, ph0)`` (:func:`_owned`), or None.
    """
    dt = np.dtype(dt)
    lanes = b.shape[:-2]
    T, n = b.shape[-2], b.shape[-1]
    L = int(np.prod(lanes, dtype=np.int64))
    A2, a_lane, a_time = _a_operand(A, dt, lanes, n)
    B2, H, h2 = _b_operands(b, h0, dt, out, lanes, n)
    args = (_A, np.int64(a_lane), np.int64(a_time), _B, _OUT, _H0, np.int32(h0 is not None),
            np.int32(T), np.int32(n), np.int32(bool(reverse)))
    plan = None
    # cp.async copies b element by element: it needs b's elements aligned to their size
    if L > 0 and T > 0 and B2.data.ptr % dt.itemsize == 0:
        aligned = A2.data.ptr % 16 == 0  # 16-byte copies of A need 16-byte rows
        for kind in _kinds(dt, n, aligned, kernel):
            plan = _plan(dt, n, L, kind, aligned, stages, row_bytes)
            if plan is not None:
                break
    if plan is not None:
        f, grid, block, shared, P = plan
        plain = (np.int32(1), np.int64(0), np.int64(T * n), np.int32(T))  # dense_lane: no chunks
        step = (f, grid[0], block[0], shared, args + (np.int32(L), np.int32(P)) + plain)
    elif L > 0 and T > 0:
        f, threads, shared = _first_kernel(dt, n, kernel)
        step = (f, L, threads, shared, args)
    else:
        step = None
    launches = None if step is None else _Launches([step])
    return _owned(launches, A, b, h0, out, A2, B2, H, h2)


def instantiations(limits):
    """Every kernel the dense drivers can name on a device of ``limits`` (``_device_limits``):
    ``{source: {name: extra compile options}}`` (for tools/compile_cuda.py)."""
    seq = {name: () for name in _first_group()}
    seq.update({name: () for dt in _DTS for kind in ("ring", "regs") for name in _group(dt, kind, limits)})
    seq.update({_name("dense_chunk_products", dt, R, D): () for dt in _DTS
                for R in (_CHUNK_RS if dt.itemsize < 16 else _CHUNK_RS[:-1]) for D in _CHUNK_DS})
    seq.update({_name("dense_chunk_products_mma", N, D): () for N in _MMA_NS for D in _CHUNK_DS})
    seq.update({_name("dense_chunk_products_h16", D): ("-arch=sm_90a",) for D in _CHUNK_DS})
    lb = {_name("dense_lookback", dt, N, W, False): () for dt in _DTS for N in (4, 8, 16, 32)
          if _lb_pad(dt, N) == N for W in _LB_WS}
    lb.update({_name("dense_lookback", np.dtype(np.float32), 16, W, True): () for W in _LB_WS})
    return {"dense.cu": seq, "dense_lookback.cu": lb}


# --------------------------------------------------------------------------- chunked

_CHUNK_RS = (1, 2, 4, 8)
_CHUNK_DS = (2, 3, 4)
_MMA_NS = (16, 32, 64)


def _chunk_mma_n(dt, n, mma, tile):
    """``N`` (n padded to 16, 32 or 64) of the tensor-core products kernel, or None where it does not
    apply (``mma`` off, a ``tile`` asked of the FMA kernel, not float32, compute capability < 8.0)."""
    if not mma or tile or dt != np.float32 or not 8 < n <= 64 or _limits()[2] < 80:
        return None
    return next(N for N in _MMA_NS if n <= N)


def _h16(N, warpgroup):
    """Whether the products run on warpgroup MMAs in FP16 pieces: N = 64 on compute capability 9.0
    (sm_90a code runs there only)."""
    return warpgroup and N == 64 and _limits()[2] == 90


def _mma_product_plan(N, total, D, warpgroup):
    """``(function, blocks, threads, shared bytes, 1)`` of the tensor-core products kernel: a block
    of ``2 N`` threads per (lane, chunk), ``A`` through a ring of ``D`` steps (default 4; 3 at
    N = 64, where 4 blocks of 50 KB share an SM; 2 on warpgroup MMAs, where 3 blocks of 65-66 KB do)."""
    h16 = _h16(N, warpgroup)
    D = D or (2 if h16 else 3 if N == 64 else 4)
    shared = (D * N * N + D * N + 2 * N) * 4  # A's ring and b's, e's double buffer
    if h16:  # two buffers of B's FP16 pieces (N x N words), e and 2^sigma double-buffered
        shared += (2 * N * N + 2 * N) * 4
        f = _common.get_function("dense.cu", _name("dense_chunk_products_h16", D), ("-arch=sm_90a",))
    else:
        group = tuple(_name("dense_chunk_products_mma", m, d) for m in _MMA_NS for d in _CHUNK_DS)
        f = _common.get_function("dense.cu", _name("dense_chunk_products_mma", N, D), group=group)
    _allow_shared(f, shared)
    # As much shared memory as the SM has: by default the driver's carveout held the N = 64 kernel
    # to 2 blocks per SM by shared memory as well as by registers
    if getattr(f, "preferred_shared_memory_carveout", None) is not None:
        f.preferred_shared_memory_carveout = 100
    return f, (total,), (2 * N,), shared, 1


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


def _product_plan(dt, n, total, R, D, mma, warpgroup):
    """``(function, blocks, threads, shared bytes, G)`` of the products kernel, or None where it does not fit."""
    N = _chunk_mma_n(dt, n, mma, R)
    if N is not None:
        return _mma_product_plan(N, total, D, warpgroup)
    optin, sms, _ = _limits()
    R = R or _chunk_tile(dt, n)
    for d in (D,) if D else (4, 3, 2):
        NT, gbytes = _chunk_geometry(dt, n, R, d)
        if gbytes <= optin:
            break
    else:
        return None
    Rs = _CHUNK_RS if dt.itemsize < 16 else _CHUNK_RS[:-1]
    group = tuple(_name("dense_chunk_products", dt, r, e) for r in Rs for e in _CHUNK_DS)
    f = _common.get_function("dense.cu", _name("dense_chunk_products", dt, R, d), group=group)
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


def _chunk_plans_for(dt, n, NL, C, vec, aligned, R, D, mma, warpgroup):
    """Plans of the three passes (products, carries, rerun), cached per shape; None where one does not fit."""
    key = (cupy.cuda.runtime.getDevice(), dt, n, NL, C, vec, aligned, R, D, mma, warpgroup)
    plans = _chunk_plans.get(key)
    if plans is None:
        def seq_plan(lanes, al, stages=None, row_bytes=None):
            for kind in _kinds(dt, n, al, "auto"):
                p = _plan(dt, n, lanes, kind, al, *((stages, row_bytes) if kind == "regs" else ()))
                if p is not None:
                    return p
            return None

        prod = _product_plan(dt, n, NL * C, R, D, mma, warpgroup)
        carry = seq_plan(NL, True)  # the work buffers are 256-byte aligned
        # The rerun has a lane per chunk. Where those outnumber the SMs, float32 blocks of n > 32
        # (a block per lane) hold fewer steps in registers and take more of a row a thread, so
        # that 3 blocks fit an SM instead of 1 (tuning.py)
        many = dt == np.float32 and n > 32 and NL * C > _limits()[1]
        rerun = seq_plan(NL * C, aligned, *((TUNING["dense_rerun_stages"], TUNING["dense_rerun_row_bytes"])
                                            if many else ()))
        plans = None if None in (prod, carry, rerun) else (prod, carry, rerun)
        _chunk_plans[key] = plans
    return plans


@functools.lru_cache(maxsize=256)
def _chunk_scalars(NL, C, L, T, n, a_lane, a_time, reverse, has_h0, G, vec, Pc, Pr):
    """The scalar kernel arguments of the three passes (built once per shape: host time per call)."""
    i32, i64 = np.int32, np.int64
    rev, nn = i32(reverse), n * n
    products = (i64(a_lane), i64(a_time), i64(n), i32(has_h0), i32(NL), i32(C), i32(L), i32(T), i32(n), rev,
                i32(G), i32(vec))
    carries = (i64(C * nn), i64(nn), i32(0), i32(C), i32(n), rev, i32(NL), i32(Pc), i32(1), i64(0), i64(C * n),
               i32(C))
    rerun = (i64(a_lane), i64(a_time), i32(1), i32(L), i32(n), rev, i32(NL * C), i32(Pr), i32(C), i64(L * a_time),
             i64(T * n), i32(T))
    return products, carries, rerun


@functools.lru_cache(maxsize=64)
def _wave_slots(dev, N, D):
    """Blocks of the warpgroup products kernel resident on the device at once."""
    f, _, block, shared, _ = _mma_product_plan(N, 1, D, True)
    per_sm = cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(f.kernel.ptr, block[0], shared)
    return per_sm * _device_limits(dev)[1]


def chunk_shape(dt, n, NL, T, length=None, depth=None, chunk_min=None, mma=True, warpgroup=True):
    """``(L, C)``: the chunk length and count :func:`chunked` uses for ``NL`` lanes of ``T`` steps.

    ``length`` (default about ``TUNING["dense_chunk_factor"] * sqrt(T)``, at least 4): the products
    pass costs ``T n^3`` multiply-adds whatever ``L``; the two latency-bound passes take ``T / L``
    (carries) and ``L`` (rerun) steps, fewest at ``L = sqrt(T)``. On warpgroup MMAs, whose blocks
    each run a chunk's steps and fit 3 an SM, as many chunks as fill whole waves (a partial last
    wave costs nearly a whole one; fewer chunks also shorten the carries pass).
    """
    chunk_min = TUNING["dense_chunk_min"] if chunk_min is None else chunk_min
    L = min(length or max(4, round(TUNING["dense_chunk_factor"] * T ** 0.5)), max(T, 1))
    C = -(-T // L) if T else 0
    N = _chunk_mma_n(dt, n, mma, None)
    if length is None and C >= chunk_min and NL and N and _h16(N, warpgroup):
        slots = _wave_slots(cupy.cuda.runtime.getDevice(), N, depth)
        waves = NL * C // slots
        if waves >= 1:
            L = -(-T // max(chunk_min, waves * slots // NL))
            C = -(-T // L)
    return L, C


def chunked(A, b, h0, dt, reverse, out, *, length=None, tile=None, depth=None, chunk_min=None, mma=True,
            warpgroup=True):
    """The dense scan in three kernel launches over chunks of ``L`` steps, into ``out``.

    1. ``dense_chunk_products``: for every (lane, chunk) at once, the chunk's transition product
       ``P_c = A[last] ... A[first]`` and its end state ``e_c`` from a zero entering state
       (``T n^3`` multiply-adds in all; float32 with ``9 <= n <= 64`` on sm_80+ on tensor cores
       in 3xTF32 (``mma``), for ``32 < n <= 64`` on compute capability 9.0 on warpgroup MMAs in
       FP16 pieces (``warpgroup``); docs/guide/dense.md gives their accuracy);
    2. the sequential kernel over the ``C`` chunks of each lane carries the entering states
       ``s_c = P_{c-1} s_{c-1} + e_{c-1}`` (``s_0`` = the initial state), ``C`` dependent steps;
    3. the sequential kernel on ``lanes x C`` lanes of ``L`` steps reruns every chunk from its
       entering state, writing ``h``.

    Blelloch's two-level scan (1990, "Prefix sums and their applications", CMU-CS-90-190) on the
    affine maps ``h -> A h + b``: the critical path is about ``L + C`` steps instead of ``T``.
    ``A`` is never expanded along time or over lanes that share it. Like cyclic reduction it
    multiplies ``A`` over a chunk: where those products overflow it returns NaN where the loop
    may still be finite. ``length``, ``depth``, ``chunk_min``: see :func:`chunk_shape`; ``tile``,
    ``depth``: ``R`` and ``D`` of the products kernel (a ``tile`` runs the FMA kernel). Falls back
    to :func:`sequential` with fewer than ``chunk_min`` chunks or where a pass's kernel does not
    fit. Returns what a call bound to this signature repeats (:func:`_owned`), or None.
    """
    dt = np.dtype(dt)
    lanes = b.shape[:-2]
    T, n = b.shape[-2], b.shape[-1]
    NL = int(np.prod(lanes, dtype=np.int64))
    chunk_min = TUNING["dense_chunk_min"] if chunk_min is None else chunk_min
    L, C = chunk_shape(dt, n, NL, T, length, depth, chunk_min, mma, warpgroup)
    if C < chunk_min or NL == 0:
        return sequential(A, b, h0, dt, reverse, out)
    A2, a_lane, a_time = _a_operand(A, dt, lanes, n)
    B2, H, h2 = _b_operands(b, h0, dt, out, lanes, n)
    if B2.data.ptr % dt.itemsize:
        return sequential(A, b, h0, dt, reverse, out)
    aligned = A2.data.ptr % 16 == 0
    V = 1 if dt.itemsize >= 16 else 16 // dt.itemsize
    vec = aligned and n % V == 0
    plans = _chunk_plans_for(dt, n, NL, C, vec, aligned, tile, depth, mma, warpgroup)
    if plans is None:
        return sequential(A, b, h0, dt, reverse, out)
    (fp, gp, bp, sp, G), (fc, gc, bc, sc, Pc), (fr, gr, br, sr, Pr) = plans
    sp_, sc_, sr_ = _chunk_scalars(NL, C, L, T, n, a_lane, a_time, bool(reverse), h0 is not None, G, vec, Pc, Pr)
    # scratch: the chunk products P, end states E and entering states S
    nn, size = n * n, dt.itemsize
    Pw, Ew, Sw = _work(0), _work(NL * C * nn * size), _work(NL * C * (nn + n) * size)
    launches = _Launches([
        (fp, gp[0], bp[0], sp, (_A, sp_[0], sp_[1], _B, _H0) + sp_[2:4] + (Pw, Ew) + sp_[4:]),
        # entering states: a plain sequential scan over the chunk slots (zero initial state)
        (fc, gc[0], bc[0], sc, (Pw, sc_[0], sc_[1], Ew, Sw, Sw) + sc_[2:]),
        # every chunk again from its entering state: lanes x C lanes of L steps (the last may be short)
        (fr, gr[0], br[0], sr, (_A, sr_[0], sr_[1], _B, _OUT, Sw) + sr_[2:]),
    ], work=NL * C * (nn + 2 * n) * size)
    return _owned(launches, A, b, h0, out, A2, B2, H, h2)


# --------------------------------------------------------------------------- lookback

_LB_WS = (1, 2, 4, 8)


def _lb_pad(dt, n):
    """``N`` of the lookback kernel for ``n``, or None where it does not apply."""
    N = max(4, 1 << max(0, (n - 1).bit_length()))
    top = 16 if dt.itemsize >= 16 else TUNING["dense_lookback_max_pad"]
    return N if N <= top else None


def _lb_mma(dt, N, mma):
    """Whether the chunk maps run on tensor cores (3xTF32, ``lb_map_mma``): float32 at N = 16, sm_80+."""
    return bool(mma) and dt == np.float32 and N == 16 and _limits()[2] >= 80


def _lb_groups(N, W, mma):
    """Sub-chunks per block: a product per 16 threads for N <= 16, per warp for N = 32 or on
    tensor cores (the kernel's ``GT``)."""
    return W * (2 if N <= 16 and not mma else 1)


def _lb_ring(N, L, W, inv, mma, ring):
    """Ring slots of ``A`` per product group: ``ring``, else ``TUNING["dense_lookback_ring"]`` (a
    tensor-core step takes a fraction of a DRAM round trip); at most a sub-chunk's steps."""
    if inv:
        return 1  # one staged matrix, no ring
    NG = _lb_groups(N, W, mma)
    r = max(1, min(ring or TUNING["dense_lookback_ring"][0 if mma else 1], 8, -(-L // NG)))
    return 1 << (r.bit_length() - 1)  # a power of two (the kernel masks ring positions)


def _lb_smem(dt, N, L, W, inv, mma, ring):
    """Dynamic shared memory bytes of ``dense_lookback`` (the layout in dense_lookback.cu)."""
    V = max(1, 16 // dt.itemsize)
    MT = (N + 1) * (N + V)
    NG = _lb_groups(N, W, mma)
    slots = 1 if inv else NG * _lb_ring(N, L, W, inv, mma, ring)
    return (slots * N * N + L * N + (NG + 2) * MT + NG * 2 * N) * dt.itemsize


def lookback_shape(dt, n, T, inv=False, length=None, warps=None, mma=True, ring=None):
    """``(L, W)`` of :func:`lookback` for ``T`` steps (``length``, ``warps`` where given).

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
    optin = _limits()[0]
    mma = _lb_mma(dt, N, mma)
    per_warp = _lb_groups(N, 1, mma)

    def warps_of(L):
        if warps:
            return warps
        if mma:  # tensor-core maps: a warp per 32 steps
            return min(4, max(1, L // 32))
        return min(4, max(1, L // 8 // per_warp))

    L = length or max(8, (2 if mma else 1) << ((max(T, 2) - 1).bit_length() // 2))
    W = warps_of(L)
    budget = optin if length else max(optin // 4, 48 * 1024)
    while L > 4 and _lb_smem(dt, N, L, W, inv, mma, ring) > budget:
        L //= 2
        W = warps_of(L)
    if _lb_smem(dt, N, L, W, inv, mma, ring) > optin:
        return None
    return L, W


def _lb_function(dt, N, W, mma, smem):
    Ns = [m for m in (4, 8, 16, 32) if _lb_pad(dt, m) == m]
    group = tuple(_name("dense_lookback", dt, m, w, False) for m in Ns for w in _LB_WS)
    if _lb_mma(dt, 16, True):
        group += tuple(_name("dense_lookback", dt, 16, w, True) for w in _LB_WS)
    f = _common.get_function("dense_lookback.cu", _name("dense_lookback", dt, N, W, mma), group=group)
    _allow_shared(f, smem)
    return f


def lookback(A, b, h0, dt, reverse, out, *, length=None, warps=None, mma=True, ring=None):
    """The dense scan in ONE kernel launch: chunk products and a decoupled look-back.

    A block per (lane, chunk of ``L`` steps) stages the chunk's ``b[t]`` in shared memory and
    streams its ``A[t]`` through a ring of a few steps per product group (``cp.async``; read again
    for the rerun, from L2); it computes the chunk's affine map ``(P_c, e_c)`` (groups of 16
    threads, a warp for ``n > 16``, on sub-chunks, then composed; float32 with ``n`` 9-16 on
    tensor cores in 3xTF32 (``mma``): docs/guide/dense.md gives its accuracy), publishes it,
    finds its entering state by a decoupled look-back over its predecessors' published maps and
    states (Merrill & Garland 2016, NVR-2016-002; matvecs only), publishes its end state and
    reruns its steps, writing ``h``: ``A`` is read twice, ``T n^3`` multiply-adds, one launch.
    Tile statuses live in the diagonal scan's workspaces (epochs, no memset per call). A chunk
    whose map or states are non-finite publishes no map and replays its steps exactly (the
    loop). ``n`` up to 32 (complex128: 16); larger ``n`` go to :func:`chunked`. Results do not
    depend on timing: every entering state is computed by the same function whichever
    predecessor's state the look-back found. ``length``, ``warps``: ``(L, W)``
    (:func:`lookback_shape`); ``ring``: steps of ``A`` in flight a group. Returns what a call
    bound to this signature repeats (:func:`_owned`), or None.
    """
    dt = np.dtype(dt)
    key = (A.shape, A.strides, A.dtype, b.shape, dt, bool(reverse), cupy.cuda.runtime.getDevice(), length, warps,
           bool(mma), ring)
    plan = _lb_plans.get(key)
    if plan is None:
        if len(_lb_plans) > 1024:
            _lb_plans.clear()
        plan = _lb_plans[key] = _lb_plan(A, b, dt, reverse, length, warps, mma, ring)
    if plan is False:
        return chunked(A, b, h0, dt, reverse, out)
    f, smem, grid, threads, full_a, a_lane, inv, rec, N, C, tail = plan
    lanes, n = b.shape[:-2], b.shape[-1]
    if grid == 0:
        return None
    # A materialised over lanes and time, contiguous: read as it is
    A2 = A if full_a else _a_operand(A, dt, lanes, n)[0]
    B2, H, h2 = _b_operands(b, h0, dt, out, lanes, n)
    size = dt.itemsize
    pa, pb, ph = A2.data.ptr, B2.data.ptr, H.data.ptr
    if pa % size or pb % size or ph % size:
        return chunked(A, b, h0, dt, reverse, out)
    fast = _ONE if (n == N and (pa | pb | ph) % 16 == 0) else _ZERO
    head = (_A, a_lane, inv, _B, _OUT, _H0, _ONE if h0 is not None else _ZERO) + tail + (fast,)
    if C > 1:  # statuses in the diagonal scan's workspace
        launches = _Launches([(f, grid, threads, smem, head + (_WS, _WS_EPOCH))], ws=(rec, grid))
    else:  # a single chunk never looks back (b stands in for the workspace)
        launches = _Launches([(f, grid, threads, smem, head + (_B, np.uint32(0)))])
    return _owned(launches, A, b, h0, out, A2, B2, H, h2)


_ONE, _ZERO = np.int32(1), np.int32(0)
_lb_plans: dict = {}


def _lb_plan(A, b, dt, reverse, length, warps, mma, ring):
    """What :func:`lookback` launches for these shapes (cached: host time per call), or False: chunked."""
    lanes = b.shape[:-2]
    T, n = b.shape[-2], b.shape[-1]
    NL = int(np.prod(lanes, dtype=np.int64))
    zero = 0 in A.strides[:-2]
    full_a = A.shape[:-3] == lanes and A.flags.c_contiguous and A.dtype == dt and not zero and T > 1
    Ac = _dense.compact(A)
    TA = Ac.shape[-3]
    inv = TA == 1
    shape = lookback_shape(dt, n, T, inv, length, warps, mma, ring)
    if shape is None:
        return False
    L, W = shape
    N = _lb_pad(dt, n)
    mma = _lb_mma(dt, N, mma)
    a_lane = TA * n * n if (full_a or not all(s == 1 for s in Ac.shape[:-3])) else 0
    C = -(-T // L) if T else 0
    grid = NL * C
    if grid >= 2**31:
        return False
    smem = _lb_smem(dt, N, L, W, inv, mma, ring)
    f = _lb_function(dt, N, W, mma, smem) if grid else None
    rec = 16 + -(-(N + 2) * N * dt.itemsize // 16) * 16  # a TileStatus of an LbRecord (dense_lookback.cu)
    tail = (np.int32(T), np.int32(n), np.int32(L), np.int32(C), np.int32(bool(reverse)),
            np.int32(_lb_ring(N, L, W, inv, mma, ring)))
    return (f, smem, grid, 32 * W, full_a, np.int64(a_lane), np.int32(inv), rec, N, C, tail)
