"""The numba backend: compiled loops over NumPy arrays, on every core, read in place.

Diagonal form (kernels in :mod:`._numba_kernels`):

``sequential``
    each lane is the plain loop ``s = a[t] * s + b[t]``, lanes spread over
    numba's threads. Lanes whose time axis is contiguous run one lane per
    iteration with the state in a register; lanes that are the contiguous axis
    (a time-major ``(T, N)`` array along axis 0, or a Fortran-ordered one)
    run in blocks of lanes stepped together, so each step reads one
    contiguous run of memory -- in place, no transposing copy (measured
    faster: ``docs/numba.md``).
``chunked``
    along time, so that a single long row uses every thread. Scan-then-fix-up
    (segments scanned from 0 straight into ``out``, a serial scan of the
    segment carries, then each carry's share added until it falls below the
    smallest normal number: for ``|a| < 1`` a few thousand steps) reads
    ``a`` and ``b`` and writes ``out`` once; reduce-then-scan (segment
    aggregates, carries, a full rescan: 5 streams) is kept for a
    time-invariant ``a`` whose fix-up would be long (``|a|`` near or above
    1, see ``_fixup_pays``).

``method="auto"`` takes ``chunked`` when there are fewer lanes than threads
and the rows are long, ``sequential`` otherwise. Broadcast ``a`` (scalar,
per-lane, per-time) reaches the kernels as a stride-0 view of its compact
array, never expanded. ``reverse`` flips views (negative strides), never data.
float16/bfloat16, which numba cannot compute with, are cast to float32 on the
way in and out (a copy: not at memory speed).

Dense form: ``sequential`` (a compiled matrix-vector loop, parallel over
lanes) or ``cyclic_reduction`` (:mod:`scanarray._dense` on NumPy's batched
``matmul``).
"""

from __future__ import annotations

import numpy as np

from .. import _dense
from .._nonfinite import mend_nonfinite
from .numpy_backend import compact

__all__ = ["auto_method", "linear_recurrence", "unavailable_reason"]

#: time-major kernel: the least bytes of a row one thread streams per step.
#: Splitting a (65536, 1024) float64 row of 8 KiB between 2 threads (4 KiB
#: each) was 2.8x slower than one thread streaming whole rows (docs/numba.md):
#: short runs per step defeat the hardware prefetchers.
MIN_ROW_BYTES = 1 << 14
#: the chunked path pays off only on rows at least this long (below it the
#: two parallel regions and the second pass cost more than they save; a loop
#: of 2**17 steps takes ~0.3 ms, a few region launches ~0.05 ms on a quiet machine)
CHUNKED_MIN_LENGTH = 1 << 17
#: chunked: time steps per superblock, and groups of 4 segments per thread in
#: each. Superblocks that fit in cache (2**20 float64 steps: 16 MiB of a and b)
#: let the rescan read from L3 and ran 2x faster than the single-thread loop on
#: a quiet 2-core machine (15 ms vs 31 ms for 2**24 steps), but every superblock
#: costs two parallel regions, and on a loaded machine each region waits for a
#: descheduled thread: 16 superblocks took 496 ms against 70 ms for one
#: (docs/numba.md). Robustness wins: one superblock up to 2**24 steps.
SUPERBLOCK = 1 << 24
SEGMENT_GROUPS = 1
#: chunked with a time-invariant ``a``: scan-then-fix-up when each segment's
#: fix-up is bounded by this share of the segment, else reduce-then-scan
#: (``_fixup_pays``; a full-length fix-up costs one stream more, docs/numba.md)
FIXUP_SHARE = 0.5
#: chunked: force ``"fixup"`` (scan-then-fix-up) or ``"reduce"`` (reduce-then-scan);
#: ``None`` chooses by ``_fixup_pays`` (tests and benchmarks set it)
CHUNKED_SCHEME = None
#: scan-then-fix-up: rows of at least this many bytes are written with
#: non-temporal stores (``_non_temporal``): twice the 32 MiB L3 of the
#: measuring machine, so that nothing the next step could find in cache is evicted
NT_MIN_BYTES = 1 << 26

_kernels = None


def _k():
    """The kernel module, imported (not compiled) on first use."""
    global _kernels
    if _kernels is None:
        from . import _numba_kernels

        _kernels = _numba_kernels
    return _kernels


def unavailable_reason():
    try:
        import numba  # noqa: F401
    except Exception as exc:  # pragma: no cover - depends on the host
        return f"numba does not import: {exc}"
    return None


def _threads() -> int:
    import numba

    return numba.get_num_threads()


def _lanes(shape) -> int:
    return int(np.prod(shape[:-1], dtype=np.int64))


def auto_method(problem):
    if problem.dense:
        # The compiled T n^2 loop beat cyclic reduction's T n^3 batched matmuls at every
        # size measured (n = 2..512, 1..64 lanes: 2x to 70x, docs/numba.md).
        return "sequential"
    T = problem.length
    if _lanes(problem.shape) < _threads() and T >= CHUNKED_MIN_LENGTH:
        return "chunked"
    return "sequential"


# --------------------------------------------------------------------------- layout helpers


def _readable(x, dt):
    """``x`` itself if numba computes with its dtype (``dt`` or ``dt``'s real part), else a cast copy."""
    real = np.empty(0, dt).real.dtype
    if x.dtype == dt or x.dtype == real:
        return x
    return x.astype(dt)


def _merge_lanes(arrays, nlead):
    """Views of ``arrays`` (same shape ``(*lanes, *rest)``) with the ``nlead`` lane axes merged.

    Returns views with one lane axis if every pair of adjacent lane axes can
    be merged in every array (``stride[i] == shape[i+1] * stride[i+1]``,
    stride 0 pairs included), else ``None``. Size-1 lane axes are dropped first.
    """
    shape = arrays[0].shape[:nlead]
    keep = [i for i in range(nlead) if shape[i] != 1]
    if not keep:
        return [x.reshape((1,) + x.shape[nlead:]) for x in arrays]
    out = []
    for x in arrays:
        st = x.strides
        rest = range(nlead, x.ndim)
        for i, j in zip(keep[:-1], keep[1:]):
            if st[i] != shape[j] * st[j]:
                return None
        n = int(np.prod([shape[i] for i in keep]))
        out.append(np.lib.stride_tricks.as_strided(
            x, (n,) + tuple(x.shape[i] for i in rest), (st[keep[-1]],) + tuple(st[i] for i in rest),
            writeable=x.flags.writeable,
        ))
    return out


def _for_each_lane_block(arrays, nlead, fn):
    """Call ``fn(*views)`` on views with one lane axis: merged, or one call per outer lane index."""
    merged = _merge_lanes(arrays, nlead)
    if merged is not None:
        fn(*merged)
        return
    for idx in np.ndindex(arrays[0].shape[:nlead - 1]):
        fn(*(x[idx] for x in arrays))


def _lane_block(out) -> int:
    """Lanes per block of the time-major kernel: a share of the threads, never below ``MIN_ROW_BYTES``."""
    L = out.shape[0]
    per_thread = -(-L // max(1, _threads()))
    return max(1, min(L, max(per_thread, MIN_ROW_BYTES // out.itemsize)))


def _lanes_contiguous(x) -> bool:
    """Whether some lane axis of ``x (*lanes, T)`` has a smaller stride than time."""
    lane = [abs(s) for s, n in zip(x.strides[:-1], x.shape[:-1]) if n > 1]
    return bool(lane) and min(lane) < abs(x.strides[-1])


# --------------------------------------------------------------------------- diagonal


def linear_recurrence(p):
    if p.dense:
        return _dense_recurrence(p)
    dt = p.dtype
    a, b, out = p.a, p.b, p.out
    if p.reverse:  # views with negative strides: no flipped copies
        a, b, out = a[..., ::-1], b[..., ::-1], out[..., ::-1]
    lanes = b.shape[:-1]
    # a broadcast a is cast (if needed) at its compact size, then viewed at full size with stride 0
    a_k = np.broadcast_to(_readable(compact(a), dt), b.shape)
    b_k = _readable(b, dt)
    work = out if out.dtype == dt else np.empty(out.shape, dt)  # float16 storage: compute in float32
    h = np.zeros(lanes, dt)
    if p.initial is not None:
        h[...] = p.initial
    h0 = None if p.initial is None else h.copy()
    k = _k()
    method = p.method

    def run(a2, b2, o2, h1):
        if method == "chunked":
            _chunked(k, a2, b2, o2, h1)
        elif _lanes_contiguous(o2):
            k.sequential_blocks(a2.T, b2.T, o2.T, h1, _lane_block(o2))
        else:
            k.sequential_rows(a2, b2, o2, h1)

    if not lanes:  # one row: give it a lane axis of length 1
        a_k, b_k, work_v, h_v = a_k[None], b_k[None], work[None], h[None]
    else:
        work_v, h_v = work, h
    # h gets a trailing axis so that it merges (or is indexed) like the lanes of the others
    _for_each_lane_block([a_k, b_k, work_v, h_v[..., None]], max(1, len(lanes)),
                         lambda a2, b2, o2, h2: run(a2, b2, o2, h2[:, 0]))
    if work is not out:
        np.copyto(out, work, casting="unsafe")
    if method == "chunked":
        # The carries P * c + H can turn an infinity into NaN where the loop keeps it
        # (see scanarray._nonfinite); only lanes with a non-finite final state are touched.
        mend_nonfinite(a, b, h0, out, h, dt)
    return p.out


def _fixup_pays(a, T, nseg) -> bool:
    """Whether scan-then-fix-up beats reduce-then-scan for ``a (lanes, T)``.

    A time-varying ``a`` always takes the fix-up (its cost is known only after
    pass 1; measured in ``docs/numba.md``). A time-invariant ``a`` (scalar or
    per lane, stride 0 along time) tells in advance how long each fix-up
    runs: the carry's share ``|a|^k |C|`` falls below the smallest normal
    number after at most ``k = log(max / tiny) / -log|a|`` steps (``max``,
    ``tiny``: the largest and smallest normal numbers, which bound ``|C|``
    and the stopping threshold). The fix-up is taken when that is below
    ``FIXUP_SHARE`` of a segment, reduce-then-scan otherwise (``|a| >= 1``:
    the fix-up would re-read and rewrite every later segment).
    """
    if a.shape[-1] == 0 or a.strides[-1] != 0:
        return True
    with np.errstate(all="ignore"):
        m = float(np.max(np.abs(a[:, 0])))
        if not m < 1.0:  # |a| >= 1 or NaN
            return False
        fi = np.finfo(a.dtype)
        steps = (np.log(float(fi.max)) - np.log(float(fi.tiny))) / -np.log(m) if m > 0 else 0.0
    seg = min(T, SUPERBLOCK) / nseg
    return steps < FIXUP_SHARE * seg


def _non_temporal(b, out) -> bool:
    """Whether pass 1 of the fix-up writes ``out`` with non-temporal stores.

    Only for real dtypes (a complex number would be two stores), rows
    contiguous along time, at least ``NT_MIN_BYTES`` per row (far beyond the
    cache, where a write-allocating store reads every line first), and an
    ``out`` that is not ``b`` (in place, the lines are in cache already).
    """
    return bool(
        out.dtype.kind == "f" and out.strides[-1] == out.itemsize and out.shape[-1] * out.itemsize >= NT_MIN_BYTES
        and not np.may_share_memory(b, out)
    )


def _chunked(k, a, b, out, h):
    ng = max(1, _threads()) * SEGMENT_GROUPS
    unit = np.ones(1, h.dtype)
    scheme = CHUNKED_SCHEME or ("fixup" if _fixup_pays(a, out.shape[-1], 4 * ng) else "reduce")
    if scheme == "fixup":
        tiny = np.array([np.finfo(h.dtype).tiny]).astype(unit.real.dtype)
        k.chunked_fixup(a, b, out, h, ng, SUPERBLOCK, unit, tiny, _non_temporal(b, out))
    else:
        k.chunked(a, b, out, h, ng, SUPERBLOCK, unit)


# --------------------------------------------------------------------------- dense


def _dense_recurrence(p):
    dt = p.dtype
    if p.method == "cyclic_reduction":
        # as the numpy backend: the block algebra meets inf * 0 where the loop would not
        with np.errstate(all="ignore"):
            h = _dense.cyclic_reduction(np, p.a, p.b, p.initial, dt, reverse=p.reverse)
        np.copyto(p.out, h, casting="unsafe")
        return p.out
    A, b, out = p.a, p.b, p.out
    if p.reverse:
        A, b, out = A[..., ::-1, :, :], b[..., ::-1, :], out[..., ::-1, :]
    lanes = b.shape[:-2]
    A_k = np.broadcast_to(_readable(_dense.compact(A), dt), A.shape)
    b_k = _readable(b, dt)
    work = out if out.dtype == dt else np.empty(out.shape, dt)
    h = np.zeros(lanes + b.shape[-1:], dt)
    if p.initial is not None:
        h[...] = p.initial
    kern = _k().dense_sequential
    if lanes:
        _for_each_lane_block([A_k, b_k, work, h], len(lanes), kern)
    else:
        kern(A_k[None], b_k[None], work[None], h[None])
    if work is not out:
        np.copyto(out, work, casting="unsafe")
    return p.out
