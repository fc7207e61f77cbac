"""The numba backend: compiled loops over NumPy arrays, on every core, read in place.

Diagonal form (kernels in :mod:`._numba_kernels`):

``sequential``
    each lane is the plain loop ``s = a[t] * s + b[t]``, lanes spread over
    numba's threads. Lanes whose time axis is contiguous (rows) run four
    to an iteration, four independent chains; lanes that are the
    contiguous axis (a time-major ``(T, N)`` array along axis 0, or a
    Fortran-ordered one) run in blocks of lanes stepped together, so each
    step reads one contiguous run of memory -- in place, no transposing copy.
``chunked``
    along time, so that a single long row uses every thread. Scan-then-fix-up
    (segments scanned from 0 straight into ``out``, a serial scan of the
    segment carries, then each carry's share added until it falls below the
    smallest normal number: for ``|a| < 1`` a few thousand steps) reads
    ``a`` and ``b`` and writes ``out`` once; reduce-then-scan (segment
    aggregates, carries, a full rescan: 5 streams) is kept for a
    time-invariant ``a`` whose fix-up would be long (``|a|`` near or above
    1, see ``_fixup_pays``). Both follow the loop at non-finite values.

``method="auto"`` takes ``chunked`` when there are fewer lanes than threads
and the rows are long, ``sequential`` otherwise. Broadcast ``a`` (scalar,
per-lane, per-time) reaches the kernels as a stride-0 view of its compact
array, never expanded. ``reverse`` flips views (negative strides), never data.
Inputs of another dtype than the accumulation dtype (float16/bfloat16, which
numba cannot compute with, integers) are cast on the way in, and float16
results on the way out (a copy: not at memory speed). A ``sequential`` call on the caller's own
memory, nothing cast, binds its loop to the call's signature (``Problem.bind``, ``_bind``): a
repeated call (bare, or through torch on CPU tensors) runs it with the views remade, without the
core's work.

Dense form: ``sequential`` (a compiled matrix-vector loop, parallel over
lanes) or ``cyclic_reduction`` (:mod:`scanarray._dense` on NumPy's batched
``matmul``). Measurements behind the choices: docs/guide/cpu.md.
"""

from __future__ import annotations

import functools
import math
import sys
import threading

import numpy as np

from .. import _dense
from ._layout import compact, lanes_contiguous, merge_axes

__all__ = ["TUNING", "adjoint", "auto_method", "linear_recurrence", "unavailable_reason"]

#: The numba backend's tunables, one line each with where it comes from (the measurements:
#: docs/guide/cpu.md). Tests and benchmarks patch entries with ``monkeypatch.setitem``. (The
#: kernels' compile-time constants, pass 1's burst lengths, are in ``_numba_kernels``.)
TUNING = {
    # method="auto": chunked only for fewer lanes than threads and rows at least this long (below
    # it the two parallel regions and the second pass cost more than they save)
    "chunked_min_length": 1 << 17,
    # chunked: steps per superblock; cache-sized ones (2**20) are faster on a quiet machine, but each
    # costs two parallel regions, which wait for a descheduled thread on a loaded one
    "superblock": 1 << 24,
    # chunked: groups of 4 interleaved segments per thread (8 chains per thread were slower)
    "segment_groups": 1,
    # chunked, time-invariant a: scan-then-fix-up while the fix-up is bounded below this share of
    # a segment, reduce-then-scan beyond (see _fixup_pays)
    "fixup_share": 0.5,
    # chunked: force "fixup" or "reduce" (tests and benchmarks); None chooses by _fixup_pays
    "scheme": None,
    # chunked: rows of at least this many bytes are written with non-temporal stores (twice the
    # measuring machine's 32 MiB L3: nothing the next step could find in cache is evicted)
    "nt_min_bytes": 1 << 26,
    # rows: lanes in groups of 4 stepped together (four dependency chains hide the latency of the
    # multiply and the add) once every thread gets at least this many groups; 1 was as fast or
    # faster than 4 on 8-24 rows of 4096-2**20 float64 steps (up to 1.7x), 2-core VM
    "rows_four_min_groups": 1,
    # rows, time-major blocks, dense lanes: the parallel variant from this many multiply-adds on
    # (below it the serial loop finished first: (64, 1024) float64 rows broke even on two threads)
    "parallel_min_work": 1 << 17,
    # time-major: the least bytes of a step one thread streams (runs of 4 KiB and more stream
    # as fast as longer ones: (65536, 1024) float64 on two threads at 0.91x the copy)
    "min_row_bytes": 1 << 12,
    # time-major EWM: the least lanes of a block (its loops do ~10x a scan's work a step, so every
    # thread gets lanes: (2**20, 32) float64, 5% NaN, mean 152 to 116 ms, var 220 to 145 against
    # 4 KiB blocks; float32 92/111 against 102/175; 8 lanes slower), 2-core VM
    "ewm_block_lanes": 16,
    # a kernel on one core writing a new result of at least this many bytes has its pages faulted
    # in by another thread meanwhile (_fault_in: one series of 2**24 float64, EWM mean with NaN,
    # 56-64 to 33-37 ms; a new array's first writes cost as much as the loop on this VM), 2-core VM
    "fault_in_min_bytes": 1 << 24,
    # dense auto: the compiled loop's ns per lane and step, a + b n^2 (float64, one thread)
    "dense_seq_ns": (40.0, 0.135),
    # dense auto: cyclic reduction's ns per lane and step, a + b n^2 (its vectors: GEMMs with a
    # time-invariant A), plus per product of a time-varying A's matrices c + d n^3 (float64)
    "dense_cr_ns": (50.0, 0.3, 400.0, 0.05),
    # EWM of NaN-free data: the one-pass loop instead of the composed scans up to this many
    # elements (one series of 2**17: 0.26 ms against 0.48; of 2**20: 1.9 against 1.1, the scans
    # chunked on both cores; 200 steps: 13 us against 98), 2-core VM
    "ewm_mean_loop_max_size": 1 << 17,
    # ... the variance's (one series of 2**20: 7.0 ms against 10.9; of 2**24: 133 against 107), and
    # wherever its lanes give every thread one ((2**20, 32): 215 against 264)
    "ewm_var_loop_max_size": 1 << 20,
}

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


def ewm_loop_first(stat, size, lanes) -> bool:
    """Whether the one-pass EWM loop of ``stat`` ("mean" or "var") beats the composed NaN-free
    scans on ``size`` elements in ``lanes`` lanes (``TUNING``; docs/guide/ewm.md)."""
    return size <= TUNING[f"ewm_{stat}_loop_max_size"] or (stat == "var" and lanes >= _threads())


def _parallel(units, work) -> bool:
    """Whether a kernel runs its parallel variant: more than one unit (lane, lane block) to share
    and at least ``parallel_min_work`` multiply-adds, below which waking the threads costs more
    than they save."""
    return units > 1 and work >= TUNING["parallel_min_work"]


def _lanes(shape) -> int:
    return math.prod(shape[:-1])


def auto_method(problem):
    if problem.dense:
        return _dense_auto_method(problem)
    return _diagonal_auto_method(problem.shape)


def _diagonal_auto_method(shape):
    """``method="auto"`` of a diagonal call of canonical shape ``(*lanes, T)``."""
    if shape[-1] >= TUNING["chunked_min_length"] and _lanes(shape) < _threads():
        return "chunked"
    return "sequential"


# --------------------------------------------------------------------------- layout helpers


def _readable(x, dt):
    """``x`` itself if its dtype is ``dt``, else a cast copy (of the compact view, broadcast back)."""
    if x.dtype == dt:
        return x
    return np.broadcast_to(compact(x).astype(dt), x.shape)


def _merge_lanes(arrays, nlead):
    """Views of ``arrays`` (same shape ``(*lanes, *rest)``) with the ``nlead`` lane axes merged
    into one, or None when their strides do not allow it (see ``_layout.merge_axes``)."""
    if nlead == 1:  # one lane axis already: nothing to merge
        return list(arrays)
    shape, strides = merge_axes(list(arrays[0].shape[:nlead]), [list(x.strides[:nlead]) for x in arrays],
                                drop_ones=True)
    if len(shape) > 1:
        return None
    n = shape[0] if shape else 1
    return [
        np.lib.stride_tricks.as_strided(x, (n,) + x.shape[nlead:], (st[0] if st else 0,) + x.strides[nlead:],
                                        writeable=x.flags.writeable)
        for x, st in zip(arrays, strides)
    ]


def _for_each_lane_block(arrays, nlead, fn):
    """Call ``fn(*views)`` on views with one lane axis: merged (returned), or one call per outer
    lane index (None returned)."""
    merged = _merge_lanes(arrays, nlead)
    if merged is not None:
        fn(*merged)
        return merged
    for idx in np.ndindex(arrays[0].shape[:nlead - 1]):
        fn(*(x[idx] for x in arrays))
    return None


def _lane_block(out, least=None) -> int:
    """Lanes per block of a time-major kernel: a share of the threads, never below ``least`` lanes
    (by default ``min_row_bytes`` worth)."""
    L = out.shape[0]
    per_thread = -(-L // max(1, _threads()))
    if least is None:
        least = TUNING["min_row_bytes"] // out.itemsize
    return max(1, min(L, max(per_thread, least)))


def _non_temporal(b, out) -> bool:
    """Whether pass 1 of the chunked fix-up writes ``out (lanes, T)`` with non-temporal stores.

    Only for real dtypes (a complex number would be two stores), rows contiguous along time, of
    at least ``nt_min_bytes`` (far beyond the cache, where a write-allocating store reads every
    line first), and an ``out`` that is not ``b`` (in place, the lines are in cache already).
    (Rows scanned whole and time-major blocks measured no faster with them: docs/guide/cpu.md.)
    """
    return bool(
        out.dtype.kind == "f" and out.strides[-1] == out.itemsize
        and out.shape[-1] * out.itemsize >= TUNING["nt_min_bytes"] and not np.may_share_memory(b, out)
    )


# --------------------------------------------------------------------------- diagonal


def linear_recurrence(p):
    # floating-point warnings off, as in NumPy's backend: casts of huge values to float32 and the
    # loop's own overflows give infinities where the loop gives them, silently
    with np.errstate(all="ignore"):
        if p.dense:
            _dense_recurrence(p)
            if p.scale is not None:
                p.out *= p.scale
            return p.out
        return _diagonal(p)


def _diagonal(p):
    dt = p.dtype
    a, b, out = p.a, p.b, p.out
    if p.reverse:  # views with negative strides: no flipped copies
        a, b, out = a[..., ::-1], b[..., ::-1], out[..., ::-1]
    lanes = b.shape[:-1]
    # inputs are read in the accumulation dtype: cast copies where they differ (a broadcast a at
    # its compact size); float16 storage computes in a float32 work array, written back once
    a_k = a if a.dtype == dt else np.broadcast_to(_readable(compact(a), dt), b.shape)
    b_k = _readable(b, dt)
    work = out if out.dtype == dt else np.empty(out.shape, dt)
    h = np.zeros(lanes, dt)
    if p.initial is not None:
        h[...] = p.initial
    k = _k()
    method = p.method
    scale = p.scale
    # Problem.scale: stored by the sequential kernels as they write (real dtypes), else a product
    # over each block after its scan (the chunked kernel carries superblocks through what it stored)
    c = _kernel_scale(dt, scale)
    # one loop on the caller's own memory, nothing cast, nothing after: a repeat needs only new views
    bindable = method == "sequential" and a_k is a and b_k is b and work is out and (
        p.initial is None or p.initial.dtype == dt)

    def run(a2, b2, o2, h1):
        if method == "chunked":
            _chunked(k, a2, b2, o2, h1)
        else:
            _sequential(k, a2, b2, o2, h1, c)
        if scale is not None and (method == "chunked" or dt.kind != "f"):
            o2 *= scale

    if not lanes:  # one row: give it a lane axis of length 1
        a_k, b_k, work_v, h_v = a_k[None], b_k[None], work[None], h[None]
    else:
        work_v, h_v = work, h
    # h gets a trailing axis so that it merges (or is indexed) like the lanes of the others
    views = _for_each_lane_block([a_k, b_k, work_v, h_v[..., None]], max(1, len(lanes)),
                                 lambda a2, b2, o2, h2: run(a2, b2, o2, h2[:, 0]))
    if work is not out:
        np.copyto(out, work, casting="unsafe")
    elif bindable and views is not None:
        # what _bind reads of p, not p itself: p holding its own bind would be a reference cycle,
        # keeping every call's arrays alive until the garbage collector runs
        p.bind = functools.partial(_bind, (p.shape, p.perm, p.reverse, p.lanes, p.dtype, p.scale), views[:3])
    return p.out


def _kernel_scale(dt, scale):
    """The factor the sequential kernels store ``h`` with (1 where none, or where it is applied
    after the loop: complex dtypes)."""
    return dt.type(1) if scale is None or dt.kind != "f" else dt.type(scale)


def _sequential(k, a2, b2, o2, h1, c):
    """The sequential loop over lanes ``(L, T)``: rows, or blocks of lanes stepped together where
    the lanes are the contiguous axis; each run chooses its variant by ``TUNING`` and the threads."""
    dt = o2.dtype
    if lanes_contiguous(o2):
        lb = _lane_block(o2)
        k.compiled("sequential_blocks", dt, _parallel(-(-o2.shape[0] // lb), o2.size))(a2.T, b2.T, o2.T, h1, lb, c)
    else:
        four = o2.shape[0] >= TUNING["rows_four_min_groups"] * 4 * _threads()
        k.compiled("sequential_rows", dt, _parallel(o2.shape[0], o2.size))(a2, b2, o2, h1, four, c)


def _bind(sig, views, a, a_const, b, h0, result, alloc):
    """``Problem.bind`` of a sequential call (``sig``: its problem's canonical shape, transpose,
    reverse, lanes, dtype and scale; ``views``: its kernels' views of ``a``, ``b`` and the
    result): ``call(a, b, h0, out)``, the same loop on new arrays of the call's signature
    (:mod:`scanarray._bound`), or None where it cannot be bound.

    The signature fixes the views (broadcast, time axis last, reversed, lanes merged): the call
    replays them by NumPy's view operations, checked here to give the very views this call's
    kernel read. What the signature does not fix is checked on each call: ``method="auto"`` and
    the variant of the loop follow ``TUNING`` and numba's threads as in the full path. A result
    given as ``out`` (``alloc`` None) is not bound: its writeability and overlaps would need checks.
    Only shapes and the scalar ``a``'s 0-d array are kept, never the call's arrays.
    """
    canonical, perm, reverse, lanes, dt, scale = sig
    if alloc is None or _diagonal_auto_method(canonical) != "sequential":
        return None
    shape = tuple(result.shape)
    n, T = views[2].shape
    c = _kernel_scale(dt, scale)

    def view(x):
        if tuple(x.shape) != shape:
            x = np.broadcast_to(x, shape)
        if perm is not None:
            x = x.transpose(perm)
        if reverse:
            x = x[..., ::-1]
        return x.reshape(n, T)  # merges the lanes (a copy where it cannot: refused below)

    if not all(_same_view(view(x), v) for x, v in zip((a, b, result), views)):
        return None
    fixed_a = view(a) if a_const else None  # the scalar's 0-d array: its value is in the key
    k = _k()

    def call(a_, b_, h0_, out_):
        if _diagonal_auto_method(canonical) != "sequential":  # the threads or TUNING changed since
            return None
        res = alloc(b_)
        h = np.zeros(lanes, dt)
        if h0_ is not None:
            h[...] = h0_
        _sequential(k, view(a_) if fixed_a is None else fixed_a, view(b_), view(res), h.reshape(n), c)
        if scale is not None and dt.kind != "f":  # the kernels store real scales only, as in the full path
            res *= scale
        return res

    return call


def _same_view(x, y) -> bool:
    """Whether ``x`` and ``y`` view the same elements at the same address (strides of length-1
    axes, which address nothing else, may differ)."""
    return x.shape == y.shape and x.__array_interface__["data"][0] == y.__array_interface__["data"][0] and all(
        s == t for s, t, m in zip(x.strides, y.strides, x.shape) if m > 1)


def _fixup_pays(a, T, nseg) -> bool:
    """Whether scan-then-fix-up beats reduce-then-scan for ``a (lanes, T)``.

    A time-varying ``a`` always takes the fix-up (its cost is known only after
    pass 1; measured in ``docs/guide/cpu.md``). A time-invariant ``a`` (scalar or
    per lane, stride 0 along time) tells in advance how long each fix-up
    runs: the carry's share ``|a|^k |C|`` falls below the smallest normal
    number after at most ``k = log(max / tiny) / -log|a|`` steps (``max``,
    ``tiny``: the largest and smallest normal numbers, which bound ``|C|``
    and the stopping threshold). The fix-up is taken when that is below
    ``fixup_share`` of a segment, reduce-then-scan otherwise (``|a| >= 1``:
    the fix-up would re-read and rewrite every later segment).
    """
    if a.shape[-1] == 0 or a.strides[-1] != 0:
        return True
    m = float(np.max(np.abs(a[:, 0])))
    if not m < 1.0:  # |a| >= 1 or NaN
        return False
    fi = np.finfo(a.dtype)
    steps = (np.log(float(fi.max)) - np.log(float(fi.tiny))) / -np.log(m) if m > 0 else 0.0
    seg = min(T, TUNING["superblock"]) / nseg
    return steps < TUNING["fixup_share"] * seg


def _chunked(k, a, b, out, h):
    dt = h.dtype
    ng = max(1, _threads()) * TUNING["segment_groups"]
    unit = np.ones(1, dt)
    scheme = TUNING["scheme"] or ("fixup" if _fixup_pays(a, out.shape[-1], 4 * ng) else "reduce")
    tiny = np.array([np.finfo(dt).tiny]).astype(unit.real.dtype)
    nt = scheme == "fixup" and _non_temporal(b, out)
    direct = not nt and not np.may_share_memory(b, out)
    k.compiled("chunked", dt)(a, b, out, h, ng, TUNING["superblock"], unit, tiny, scheme == "fixup", nt, direct)


def adjoint(a, g, lam, h, ga, reverse, method="auto"):
    """The adjoint's scan in one pass (``BackendSpec.shifted_adjoint``, scanarray/_vjp.py) on the
    canonical views ``(*lanes, T)``: ``lam`` (grad_b) and ``ga`` (grad_a, zero at the forward's
    first step) written, ``a[t+1]`` and ``h[t-1]`` read one step away. Returns a function that
    repeats it on new views of the same layout, or False where it does not take them (mixed
    dtypes, fewer than two steps, lanes that no one stride walks, and where ``method`` is or
    ``auto`` would be ``chunked``: few long rows, which the threads share along time)."""
    dt = lam.dtype
    writable = ga.flags.writeable and lam.flags.writeable
    if any(x.dtype != dt for x in (a, g, h, ga)) or lam.shape[-1] < 2 or not writable:
        return False
    if method == "chunked" or (method == "auto" and _diagonal_auto_method(lam.shape) == "chunked"):
        return False  # few long rows: the chunked scan's threads, as the forward call's
    if not _adjoint(a, g, lam, h, ga, reverse):
        return False
    return lambda a_, g_, lam_, h_, ga_: _adjoint(a_, g_, lam_, h_, ga_, reverse)


def _adjoint(a, g, lam, h, ga, reverse):
    views = [np.broadcast_to(a, lam.shape), g, lam, h, ga]
    if reverse:
        views = [x[..., ::-1] for x in views]
    if lam.ndim == 1:
        views = [x[None] for x in views]
    views = _merge_lanes(views, max(1, lam.ndim - 1))
    if views is None:
        return False
    a2, g2, l2, h2, ga2 = views
    k = _k()
    if lanes_contiguous(l2):
        lb = _lane_block(l2)
        k.compiled("adjoint_blocks", l2.dtype, _parallel(-(-l2.shape[0] // lb), l2.size))(
            a2.T, g2.T, l2.T, h2.T, ga2.T, lb)
    else:
        k.compiled("adjoint_rows", l2.dtype, _parallel(l2.shape[0], l2.size))(a2, g2, l2, h2, ga2)
    return True


# --------------------------------------------------------------------------- dense


def _dense_auto_method(problem):
    """The dense method of ``method="auto"``: the cheaper by the cost model of ``TUNING``.

    The compiled loop costs ``dense_seq_ns`` per lane and step (``a + b n^2`` ns), its lanes
    shared by the threads; cyclic reduction, on NumPy's ``matmul``, costs ``dense_cr_ns``: ``a + b
    n^2`` per lane and step for its vectors, plus ``c + d n^3`` per matrix product of a
    time-varying ``A``. On the measuring machine the loop was the
    cheaper at every size (docs/guide/cpu.md): the model keeps the choice where a faster BLAS
    would move it.
    """
    T, n = problem.length, problem.b.shape[-1]
    a = problem.a
    lanes, a_lanes = _dense.lane_counts(a, problem.lanes)
    seq_a, seq_b = TUNING["dense_seq_ns"]
    cr_a, cr_b, cr_mat, cr_n3 = TUNING["dense_cr_ns"]
    seq = -(-lanes // max(1, _threads())) * T * (seq_a + seq_b * n * n)
    cr = lanes * T * (cr_a + cr_b * n * n)
    if a.strides[-3] != 0:
        cr += a_lanes * T * (cr_mat + cr_n3 * n**3)
    return "cyclic_reduction" if cr < seq else "sequential"


def _dense_recurrence(p):
    dt = p.dtype
    if p.method == "cyclic_reduction":
        h = _dense.cyclic_reduction(np, p.a, p.b, p.initial, dt, reverse=p.reverse)
        np.copyto(p.out, h, casting="unsafe")
        return p.out
    A, b, out = p.a, p.b, p.out
    if p.reverse:
        A, b, out = A[..., ::-1, :, :], b[..., ::-1, :], out[..., ::-1, :]
    lanes = b.shape[:-2]
    A_k = np.broadcast_to(_readable(compact(A), dt), A.shape)
    b_k = _readable(b, dt)
    work = out if out.dtype == dt else np.empty(out.shape, dt)
    h = np.zeros(lanes + b.shape[-1:], dt)
    if p.initial is not None:
        h[...] = p.initial
    if lanes:
        _for_each_lane_block([A_k, b_k, work, h], len(lanes),
                             lambda *x: _k().compiled("dense_sequential", dt, _parallel(x[0].shape[0], x[1].size * x[1].shape[-1]))(*x))
    else:  # one trajectory: no parallel region to wait on
        _k().compiled("dense_sequential", dt, False)(A_k[None], b_k[None], work[None], h[None])
    if work is not out:
        np.copyto(out, work, casting="unsafe")
    return p.out


def sos_cascade(sos, x, z, y):
    """:func:`scanarray.signal.sosfilt`'s loop (``_numba_kernels.sos_cascade``) on ``x (L, T)``
    into ``y`` (a new array), the delays ``z (L, n, 2)`` updated in place; all of ``sos``'s dtype."""
    par = _parallel(x.shape[0], x.size * sos.shape[0] * 5)
    _fault_in(y, not par, _k().compiled("sos_cascade", sos.dtype, par), sos, x, z, y)


def lfilter_df2t(b, a, x, z, y):
    """:func:`scanarray.signal.lfilter`'s loop (``_numba_kernels.lfilter_df2t``) on ``x (L, T)``
    into ``y`` (a new array), the delays ``z (L, K)`` updated in place; all of ``b``'s dtype."""
    par = _parallel(x.shape[0], x.size * z.shape[1] * 2)
    _fault_in(y, not par, _k().compiled("lfilter_df2t", b.dtype, par), b, a, x, z, y)


_MADV_POPULATE_WRITE = 23  # <linux/mman.h>


@functools.lru_cache(maxsize=None)
def _populate_write():
    """libc's ``madvise`` where Linux's ``MADV_POPULATE_WRITE`` (5.14 and later) works, else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes
        import mmap

        f = ctypes.CDLL(None, use_errno=True).madvise
        f.argtypes, f.restype = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int], ctypes.c_int
        probe = np.empty(3 * mmap.PAGESIZE, np.uint8)
        page = -(-probe.ctypes.data // mmap.PAGESIZE) * mmap.PAGESIZE
        return f if f(page, mmap.PAGESIZE, _MADV_POPULATE_WRITE) == 0 else None
    except (OSError, AttributeError):
        return None


def _fault_in(out, serial, kernel, *args):
    """``kernel(*args)``; where it runs on one core (``serial``) and writes ``out``, a new
    C-contiguous array of at least ``fault_in_min_bytes``, another thread faults ``out``'s pages
    in meanwhile (``MADV_POPULATE_WRITE``, which leaves the memory's contents alone), ahead of the
    kernel's writes: a new array's first writes cost about as much as a one-pass loop
    (docs/guide/cpu.md)."""
    madvise = None
    if serial and out.nbytes >= TUNING["fault_in_min_bytes"] and out.flags.c_contiguous and _threads() > 1:
        madvise = _populate_write()
    if madvise is None:
        return kernel(*args)
    import mmap

    lo = out.ctypes.data // mmap.PAGESIZE * mmap.PAGESIZE
    started = threading.Event()

    def populate():
        started.set()
        madvise(lo, out.ctypes.data + out.nbytes - lo, _MADV_POPULATE_WRITE)

    helper = threading.Thread(target=populate, name="scanarray-fault-in", daemon=True)
    try:
        helper.start()
    except RuntimeError:  # no thread to be had: the kernel faults its pages in itself
        return kernel(*args)
    started.wait()
    try:
        return kernel(*args)
    finally:
        helper.join()


# --------------------------------------------------------------------------- GAE and discounted returns


def gae(r, v, d, gamma, lam, boot, axis, *, terminated=None, next_values=None, **_):
    """GAE's advantages (``scanarray.rl.gae``) of NumPy arrays ``r``, ``v`` (float32/float64, one
    shape and dtype) with flags ``d`` of that shape, in one pass backwards through time
    (``_numba_kernels.gae_rows`` / ``gae_blocks``): the loop's operations in its order. ``v``
    None: no values, the discounted returns when ``lam`` is 1. ``boot``: None or an array
    broadcastable to the lanes; ``terminated`` (flags of any dtype), ``next_values``: None or
    arrays of ``r``'s shape (``next_values`` of its dtype). A new array laid out as the kernel
    wrote it, or None where the dtypes are not these."""
    dt = r.dtype
    if dt.name not in ("float32", "float64") or r.size == 0 or r.ndim < 1:
        return None
    if d.dtype != dt and (d.dtype != np.bool_ or terminated is not None):
        d = d.astype(dt)  # (flags of other dtypes, or beside terminated: as the loop reads them)
    if terminated is not None and terminated.dtype != dt:
        terminated = terminated.astype(dt)
    T = r.shape[axis]
    lanes = r.shape[:axis] + r.shape[axis + 1:]
    b = np.zeros(lanes, dt) if boot is None else np.broadcast_to(np.asarray(boot, dt), lanes)
    b = np.ascontiguousarray(b).reshape(-1)
    arrays = (r, r if v is None else v, d, r if next_values is None else next_values, d if terminated is None else
              terminated)
    t = dt.type
    args = (t(gamma), t(gamma * lam), v is not None, next_values is not None, terminated is not None)
    k = _k()
    if lanes_contiguous(np.moveaxis(r, axis, -1)):  # time-major: blocks of lanes step together
        views = [np.moveaxis(z, axis, 0).reshape(T, -1) for z in arrays]
        out = np.empty((T,) + lanes, dt)
        o2 = out.reshape(T, -1)
        lb = _lane_block(o2.T)
        par = _parallel(-(-o2.shape[1] // lb), r.size)
        _fault_in(out, not par, k.compiled("gae_blocks", dt, par, d.dtype), *views, o2, b, lb, *args)
        return np.moveaxis(out, 0, axis)
    views = [np.moveaxis(z, axis, -1).reshape(-1, T) for z in arrays]
    out = np.empty(lanes + (T,), dt)
    o2 = out.reshape(-1, T)
    par = _parallel(o2.shape[0], r.size)
    _fault_in(out, not par, k.compiled("gae_rows", dt, par, d.dtype), *views, o2, b, *args)
    return np.moveaxis(out, -1, axis)


# --------------------------------------------------------------------------- exponentially weighted mean


def ewm_mean(x, axis, g, ignore_na, min_periods, adjust=True, quirk=False):
    """pandas' ``ewm(adjust=..., ignore_na=...).mean()`` of NumPy array ``x`` (float32 or float64)
    along ``axis`` in one pass (``_numba_kernels.ewm_mean_rows`` / ``ewm_mean_blocks``), decay ``g =
    1 - alpha``, ``min_periods >= 1``, ``quirk``: pandas' ``com == 1`` rule for adjust=False
    (``_ewm._Ewm.mean``): a new array, laid out as the kernel wrote it (a view with time moved
    back to ``axis``)."""
    t = x.dtype.type
    return _ewm_pass(x, axis, "ewm_mean", t(g), bool(ignore_na), bool(adjust), bool(quirk), min_periods)


def ewm_var(x, axis, g, new_wt, ignore_na, adjust, min_periods, bias, tiny):
    """pandas' ``ewm(...).var(bias=...)`` of NumPy array ``x`` along ``axis`` in one pass
    (``_numba_kernels.ewm_var_rows`` / ``ewm_var_blocks``): decay ``g``, pandas' ``new_wt``,
    ``min_periods >= 1``, ``tiny`` where ``S**2`` takes pandas' own difference (``_ewm._Ewm.var``)."""
    t = x.dtype.type
    return _ewm_pass(x, axis, "ewm_var", t(g), t(new_wt), bool(ignore_na), bool(adjust), min_periods, bool(bias),
                     t(tiny))


def _ewm_pass(x, axis, name, *args):
    """Kernel ``name``'s rows variant over the lanes of ``x`` (time contiguous or any other layout),
    or its blocks variant over time-major data, into a new array."""
    T = x.shape[axis]
    if x.size == 0:
        return np.empty_like(x)
    k = _k()
    if lanes_contiguous(np.moveaxis(x, axis, -1)):  # time-major: blocks of lanes step together
        xt = np.moveaxis(x, axis, 0)
        out = np.empty(xt.shape, x.dtype)
        x2, o2 = xt.reshape(T, -1), out.reshape(T, -1)
        lb = _lane_block(o2.T, TUNING["ewm_block_lanes"])
        par = _parallel(-(-o2.shape[1] // lb), x.size)
        _fault_in(out, not par, k.compiled(name + "_blocks", x.dtype, par), x2, o2, lb, *args)
        return np.moveaxis(out, 0, axis)
    xt = np.moveaxis(x, axis, -1)
    out = np.empty(xt.shape, x.dtype)
    x2, o2 = xt.reshape(-1, T), out.reshape(-1, T)
    par = _parallel(o2.shape[0], x.size)
    _fault_in(out, not par, k.compiled(name + "_rows", x.dtype, par), x2, o2, *args)
    return np.moveaxis(out, -1, axis)
