"""The numba.cuda backend: the work-efficient (Blelloch) scan of (a, b) pairs on CuPy arrays.

The recurrence ``h[t] = a[t] * h[t-1] + b[t]`` is a scan of the pairs
``(a, b)`` under the associative operator ``(a1, b1) then (a2, b2) =
(a2 * a1, a2 * b1 + b2)`` [1]_. Each row (lane) is cut into tiles of up to
``MAX_TILE`` steps held in shared memory; a tile is scanned by Blelloch's
up-sweep (a reduction tree, ``log2(tile)`` levels) and down-sweep (the tree
run backwards with the incoming carry at its root), ``2 tile`` combines in
all [2]_. Rows longer than one tile take three launches, reduce-then-scan:

1. reduce: the up-sweep alone gives every tile's aggregate ``(prod a, h from 0)``;
2. carries: the aggregates are themselves a linear recurrence over tiles,
   scanned by this same function (recursively) from ``initial``;
3. scan: every tile runs both sweeps with its carry at the root and writes ``h``.

CuPy arrays reach numba through ``__cuda_array_interface__`` without copies
and the kernels run on CuPy's current stream. A tile that meets a NaN or an
infinity (in ``a``, ``b`` or its carry) runs the plain loop instead, so
non-finite values land where the sequential loop puts them (a tree would turn
``0 * inf`` into NaN across a reset). float16 is read as float16 and
accumulated in float32, through a float32 work array that the non-finite mend
reads (as does a scan in place, ``out=b``); bfloat16 (unknown to numba) goes
through a float32 copy.

The kernel-level entry point :func:`scan4d` takes 4-d arrays ``(L1, L2, L3,
T)`` of NumPy (under ``NUMBA_ENABLE_CUDASIM=1``) or numba device arrays, so
the CUDA simulator tests run without CuPy.

References
----------
.. [1] G. E. Blelloch, "Prefix sums and their applications", CMU-CS-90-190, 1990.
.. [2] M. Harris, S. Sengupta, J. D. Owens, "Parallel prefix sum (scan) with CUDA",
       GPU Gems 3, ch. 39, 2007.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from .. import _dtypes
from ._layout import merge_axes

__all__ = ["auto_method", "linear_recurrence", "scan4d", "unavailable_reason"]

#: longest tile (power of two) scanned in one block's shared memory
MAX_TILE = 1024
#: threads per block at most
MAX_THREADS = 1024
#: shared memory per block for the two tile arrays (bytes)
SMEM_BYTES = 32 * 1024
#: under the simulator every CUDA thread is a Python thread: keep blocks small
SIM_MAX_TILE = 32
SIM_MAX_THREADS = 64

#: numba.cuda, imported on first use and bound as a *module global*: the CUDA simulator
#: swaps the ``cuda`` global of a kernel's module for its fake, never a closure variable.
cuda = None

#: the storage dtypes of the table that NumPy itself defines, which numba compiles; others (ml_dtypes'
#: bfloat16) go through a copy in the accumulation dtype
_NUMBA_DTYPES = frozenset(n for n in _dtypes.DTYPES if hasattr(np, n))


def unavailable_reason():
    try:
        from numba import cuda
    except Exception as exc:  # e.g. numba-cuda registering np.row_stack, gone in NumPy 2.5
        return f"numba.cuda does not import: {exc}"
    try:
        ok = cuda.is_available()
    except Exception as exc:  # pragma: no cover - depends on the driver
        return f"numba.cuda finds no device: {exc}"
    return None if ok else "numba.cuda finds no CUDA device"


def auto_method(problem):
    return "blelloch"


# --------------------------------------------------------------------------- kernels


def _import_cuda():
    global cuda
    if cuda is None:
        from numba import cuda as _cuda

        cuda = _cuda
    return cuda


def _simulating() -> bool:
    from numba import config

    return bool(config.ENABLE_CUDASIM)


@functools.lru_cache(maxsize=None)
def _kernel(tile: int, rpb: int, lane_fast: bool, acc_name: str):
    """The tile kernel for one geometry and accumulation dtype (numba specialises on array types)."""
    import numba

    _import_cuda()
    acc = getattr(numba, acc_name)
    half = tile // 2
    # Rows padded by one element: with lane-fast threads a warp touches several rows at the
    # same offset, which would all fall in one shared-memory bank.
    stride = tile + 1 if rpb > 1 else tile
    n = rpb * stride
    INF = math.inf

    @cuda.jit(device=True)
    def finite(x):
        return abs(x) < INF  # False for NaN and for infinities (real or complex)

    @cuda.jit
    def kernel(a, b, out, carry, aggA, aggH, T, L, L2, L3, nt, reverse, mode):
        # mode 0: scan the tile from its carry and write out; mode 1: write the tile's aggregate.
        sA = cuda.shared.array(n, acc)
        sH = cuda.shared.array(n, acc)
        tid = cuda.threadIdx.x
        if lane_fast:  # neighbouring threads take neighbouring rows: coalesced when lanes are contiguous
            r = tid % rpb
            i = tid // rpb
        else:
            r = tid // half
            i = tid % half
        blk = cuda.blockIdx.x
        rb = blk // nt
        k = blk % nt
        row = rb * rpb + r
        valid = row < L
        l1 = row // (L2 * L3)
        rem = row % (L2 * L3)
        l2 = rem // L3
        l3 = rem % L3
        base = r * stride
        t0 = k * tile

        xa0 = acc(1)
        xb0 = acc(0)
        xa1 = acc(1)
        xb1 = acc(0)
        c = acc(0)
        ok = True
        if valid:
            t = t0 + i
            if t < T:
                tt = T - 1 - t if reverse else t
                xa0 = acc(a[l1, l2, l3, tt])
                xb0 = acc(b[l1, l2, l3, tt])
            t = t0 + i + half
            if t < T:
                tt = T - 1 - t if reverse else t
                xa1 = acc(a[l1, l2, l3, tt])
                xb1 = acc(b[l1, l2, l3, tt])
            if mode == 0:
                c = acc(carry[row, k])
            ok = finite(xa0) and finite(xb0) and finite(xa1) and finite(xb1) and finite(c)
        sA[base + i] = xa0
        sH[base + i] = xb0
        sA[base + i + half] = xa1
        sH[base + i + half] = xb1
        slow = cuda.syncthreads_or(0 if ok else 1)

        if slow:
            # The plain loop, one thread per row (rare: NaN or Inf somewhere in this block).
            if valid and i == 0:
                h = c
                p = acc(1)
                for j in range(tile):
                    t = t0 + j
                    if t >= T:
                        break
                    tt = T - 1 - t if reverse else t
                    av = acc(a[l1, l2, l3, tt])
                    h = av * h + acc(b[l1, l2, l3, tt])
                    p = av * p
                    if mode == 0:
                        out[l1, l2, l3, tt] = h
                if mode == 1:
                    aggA[row, k] = p
                    aggH[row, k] = h
            return

        # Up-sweep: position o*(2i+2)-1 takes the aggregate of the o*2 steps ending there.
        offset = 1
        d = half
        while d > 0:
            cuda.syncthreads()
            if i < d:
                ai = base + offset * (2 * i + 1) - 1
                bi = base + offset * (2 * i + 2) - 1
                ab = sA[bi]
                sH[bi] = ab * sH[ai] + sH[bi]
                sA[bi] = ab * sA[ai]
            offset *= 2
            d //= 2
        cuda.syncthreads()
        if mode == 1:
            if valid and i == 0:
                aggA[row, k] = sA[base + tile - 1]
                aggH[row, k] = sH[base + tile - 1]
            return

        # Down-sweep: the root holds the carry; each node hands its left child the state
        # entering it and its right child that state advanced over the left subtree.
        if i == 0:
            sH[base + tile - 1] = c
        d = 1
        while d < tile:
            offset //= 2
            cuda.syncthreads()
            if i < d:
                ai = base + offset * (2 * i + 1) - 1
                bi = base + offset * (2 * i + 2) - 1
                th = sH[ai]
                sH[ai] = sH[bi]
                sH[bi] = sA[ai] * sH[bi] + th
            d *= 2
        cuda.syncthreads()
        if valid:
            t = t0 + i
            if t < T:
                tt = T - 1 - t if reverse else t
                out[l1, l2, l3, tt] = xa0 * sH[base + i] + xb0
            t = t0 + i + half
            if t < T:
                tt = T - 1 - t if reverse else t
                out[l1, l2, l3, tt] = xa1 * sH[base + i + half] + xb1

    return kernel


def _geometry(T, lane_fast, itemsize):
    sim = _simulating()
    max_tile = SIM_MAX_TILE if sim else MAX_TILE
    max_threads = SIM_MAX_THREADS if sim else MAX_THREADS
    tile = 2
    while tile < min(T, max_tile):
        tile *= 2
    half = tile // 2
    by_smem = max(1, SMEM_BYTES // (2 * tile * itemsize))
    want = 32 if lane_fast else max(1, 256 // half)
    rpb = max(1, min(want, max_threads // half, by_smem))
    return tile, rpb


def scan4d(a, b, out, init, reverse=False, *, xp=np, acc=None, stream=0, wrap=None, mend=True):
    """Scan 4-d arrays ``(L1, L2, L3, T)`` along the last axis into ``out``.

    Parameters
    ----------
    a, b : arrays
        Coefficients and inputs of shape ``(L1, L2, L3, T)`` (``a`` may have
        zero strides), non-negative strides, of any dtype numba reads.
    out : array
        Result ``(L1, L2, L3, T)``, of dtype ``acc`` or float16; may be ``b`` itself (then, or
        for float16, the scan goes through a work array of dtype ``acc``).
    init : array or None
        State before the first step, shape ``(L1 * L2 * L3,)``, dtype ``acc``.
    reverse : bool
        Scan from ``T - 1`` down to 0.
    xp : module
        Array module for temporaries (NumPy under the simulator, CuPy on a GPU).
    acc : numpy dtype
        Accumulation dtype (float32, float64, complex64, complex128).
    stream : numba stream or 0
    wrap : callable, optional
        Turns an ``xp`` array into what a numba kernel takes (``cuda.as_cuda_array``).
    mend : bool
        Make non-finite values land where the sequential loop puts them
        (``scanarray._nonfinite``); the recursive carry scan leaves it to the top level.
    """
    acc = np.dtype(acc if acc is not None else out.dtype)
    wrap = wrap or (lambda x: x)
    L1, L2, L3, T = b.shape
    L = L1 * L2 * L3
    if L == 0 or T == 0:
        return
    if mend and (np.dtype(out.dtype) != acc or xp.may_share_memory(out, b) or xp.may_share_memory(out, a)):
        # The mend replays the loop from the inputs and the states (scanarray._nonfinite): float16
        # storage would round a float32 state of 1e-9 to 0, and an out that is b would have lost
        # the inputs. Scan into a work array of the accumulation dtype, as the numpy backend does,
        # and write out once.
        work = xp.empty(out.shape, dtype=acc)
        scan4d(a, b, work, init, reverse, xp=xp, acc=acc, stream=stream, wrap=wrap)
        with np.errstate(all="ignore"):  # (NumPy under the simulator) float16 overflows to inf
            out[...] = work
        return
    lane_fast = L3 > 1 and 0 < b.strides[2] < b.strides[3]
    tile, rpb = _geometry(T, lane_fast, acc.itemsize)
    nt = -(-T // tile)
    nrb = -(-L // rpb)
    kern = _kernel(tile, rpb, lane_fast, acc.name)
    carry = xp.zeros((L, nt), dtype=acc)
    if init is not None:
        carry[:, 0] = init
    dummy = xp.zeros((1, 1), dtype=acc)
    dummy4 = xp.zeros((1, 1, 1, 1), dtype=out.dtype)  # mode 1 writes no out; same type keeps one specialisation
    threads = rpb * (tile // 2)
    rev = np.int32(bool(reverse))
    if nt > 1:
        aggA = xp.empty((L, nt), dtype=acc)
        aggH = xp.empty((L, nt), dtype=acc)
        kern[nrb * nt, threads, stream](wrap(a), wrap(b), wrap(dummy4), wrap(carry), wrap(aggA), wrap(aggH),
                                        T, L, L2, L3, nt, rev, np.int32(1))
        # The state entering tile k is the recurrence over tile aggregates 0..k-1.
        # (Contiguous copies of these small arrays: the simulator moves only contiguous buffers.)
        sub = (1, 1, L, nt - 1)
        states = xp.empty(sub, dtype=acc)
        scan4d(xp.ascontiguousarray(aggA[:, : nt - 1]).reshape(sub),
               xp.ascontiguousarray(aggH[:, : nt - 1]).reshape(sub), states,
               init, False, xp=xp, acc=acc, stream=stream, wrap=wrap, mend=False)
        carry[:, 1:] = states.reshape(L, nt - 1)
    kern[nrb * nt, threads, stream](wrap(a), wrap(b), wrap(out), wrap(carry), wrap(dummy), wrap(dummy),
                                    T, L, L2, L3, nt, rev, np.int32(0))
    if mend:  # the tree and the tile carries compute inf*x + inf*y where the loop has inf*(x + y)
        from .._nonfinite import mend_nonfinite_on

        h0 = None if init is None else init.reshape(L1, L2, L3)
        if reverse:
            a, b, out = a[..., ::-1], b[..., ::-1], out[..., ::-1]
        mend_nonfinite_on(xp, a, b, h0, out, acc)


# --------------------------------------------------------------------------- CuPy driver


def _known(x) -> bool:
    """Whether numba compiles for ``x``'s dtype."""
    dt = np.dtype(x.dtype)
    return dt.name in _NUMBA_DTYPES or dt.kind in "biu"


def _readable(x) -> bool:
    """Whether a numba kernel can read ``x`` as it is (dtype known to numba, strides >= 0)."""
    return _known(x) and min(x.strides, default=0) >= 0


def _as_strided(cupy, x, shape, strides):
    return cupy.lib.stride_tricks.as_strided(x, shape=tuple(shape), strides=tuple(strides))


def linear_recurrence(p):
    import cupy

    _import_cuda()
    b, a, out = p.b, p.a, p.out
    acc = np.dtype(p.dtype)
    shape = b.shape
    lanes = shape[:-1]
    copy_back = None
    # numba knows neither bfloat16 nor (reliably) negative strides: such inputs go through copies.
    if not _readable(b):
        b = cupy.ascontiguousarray(b) if _known(b) else b.astype(acc)
    if not _readable(a):
        from ._layout import compact

        ac = compact(a)
        ac = cupy.ascontiguousarray(ac) if _known(ac) else ac.astype(acc)
        a = cupy.broadcast_to(ac, shape)
    # The kernel writes the accumulation dtype, or float16 (converted on store).
    if min(out.strides, default=0) < 0 or np.dtype(out.dtype) not in (acc, np.dtype(np.float16)):
        copy_back = out
        out = cupy.empty(shape, dtype=acc)

    # Lanes as three axes (L1, L2, L3), merged where b, out and a all allow it.
    ls, (sb, so, sa) = merge_axes(list(lanes), [list(b.strides[:-1]), list(out.strides[:-1]), list(a.strides[:-1])], drop_ones=True)
    if len(ls) > 3:  # rare: more than three unmergeable lane axes
        b = cupy.ascontiguousarray(b)
        if copy_back is None:
            copy_back = out
            out = cupy.empty(shape, dtype=acc)
        a = cupy.ascontiguousarray(a)  # materialised only in this rare layout
        ls, (sb, so, sa) = merge_axes(list(lanes), [list(b.strides[:-1]), list(out.strides[:-1]), list(a.strides[:-1])], drop_ones=True)
    while len(ls) < 3:
        ls, sb, so, sa = [1] + ls, [0] + sb, [0] + so, [0] + sa
    T = shape[-1]
    b4 = _as_strided(cupy, b, ls + [T], sb + [b.strides[-1]])
    o4 = _as_strided(cupy, out, ls + [T], so + [out.strides[-1]])
    a4 = _as_strided(cupy, a, ls + [T], sa + [a.strides[-1]])

    init = None
    if p.initial is not None:
        init = cupy.ascontiguousarray(cupy.broadcast_to(p.initial, lanes).astype(acc)).reshape(-1)

    cs = cupy.cuda.get_current_stream()
    stream = cuda.external_stream(cs.ptr) if cs.ptr else 0
    scan4d(a4, b4, o4, init, p.reverse, xp=cupy, acc=acc, stream=stream,
           wrap=lambda x: cuda.as_cuda_array(x, sync=False))
    if copy_back is not None:
        copy_back[...] = out.astype(copy_back.dtype)
    return p.out
