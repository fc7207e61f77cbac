"""The compiled loops of the numba backend (private; the driver is :mod:`.numba_backend`).

Every kernel takes the canonical views ``(lanes, T)`` of the diagonal form (dense:
``(lanes, T, n)``), in whatever strides the caller's memory has: numba reads non-contiguous and
stride-0 (broadcast) arrays through their strides, so a scalar, per-lane or per-time ``a`` is
passed as a broadcast view of its compact array and is never expanded. ``h`` carries the state:
it holds ``h[-1]`` on entry and ``h[T-1]`` on exit. ``out`` may be ``b`` itself: every kernel
reads ``b[l, t]`` before it writes ``out[l, t]``, and the chunked kernels write a step of ``out``
only once its value is known to need no second look at ``b``.

Compilation is lazy and shared: :func:`compiled` builds a kernel for one accumulation dtype on
first use, with every array argument typed as any-layout (``'A'``; inputs read-only), so that
one machine-code variant per dtype serves every layout, broadcast and in-place call.
``cache=True`` stores it next to this file (``__pycache__``); a file lock makes concurrent
processes (pytest-xdist workers, Dask workers) compile each variant once and load it after.

Non-finite values land where the sequential loop puts them, in every kernel: the sequential
kernels are the loop, and the chunked ones replay the loop exactly where a segment's values
or its carry are not finite (``inf * x + inf * y`` is not ``inf * (x + y)``).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
import types as pytypes

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic
from numba.np.numpy_support import from_dtype

__all__ = ["compiled"]

_OPTS = dict(cache=True, nogil=True, error_model="numpy")

#: kernel name -> (Python function, argument spec, njit options); see :func:`compiled`
_KERNELS: dict = {}
#: (kernel name, dtype) -> its dispatcher, compiled for that dtype only
_COMPILED: dict = {}
_LOCK = threading.Lock()


def _kernel(spec, **opts):
    """Register a kernel with its argument spec (see :func:`_signature`); nothing is compiled."""

    def register(fn):
        _KERNELS[fn.__name__] = (fn, spec, opts)
        return fn

    return register


def _signature(spec, dt, flags=None):
    """The numba argument types of ``spec`` for accumulation dtype ``dt``.

    ``rK`` / ``wK``: a read-only / writable ``K``-d array of ``dt``, any layout; ``t1``: a
    read-only 1-d array of ``dt``'s real type; ``f2``: a read-only 2-d array of ``flags``;
    ``i``: int64; ``b``: bool; ``s``: a scalar of ``dt``.
    """
    d, real = from_dtype(dt), from_dtype(np.empty(0, dt).real.dtype)
    out = []
    for code in spec.split():
        if code == "f2":
            out.append(types.Array(from_dtype(np.dtype(flags)), 2, "A", readonly=True))
        elif code == "i":
            out.append(types.int64)
        elif code == "b":
            out.append(types.boolean)
        elif code == "s":
            out.append(d)
        elif code == "t1":
            out.append(types.Array(real, 1, "A", readonly=True))
        else:
            out.append(types.Array(d, int(code[1:]), "A", readonly=code[0] == "r"))
    return tuple(out)


def compiled(name, dt, parallel=True, flags=None):
    """Kernel ``name`` compiled (or loaded from the cache) for accumulation dtype ``dt`` (and the
    dtype ``flags`` of its ``f2`` argument, if it has one).

    One variant per dtype: arrays of any layout and writeability convert to its argument types
    (a C-ordered array is an any-layout array; a writable one may be read only). With
    ``parallel=False`` the kernel's ``prange`` is a plain loop: for calls with one iteration to
    share, where a parallel region would only wait for threads that have nothing to do (on a
    busy machine, for whole scheduler slices). Compiling holds a lock file shared by every
    process on the machine, so that processes starting together compile each variant once and
    the others load it from the cache, and no two processes write the cache's index at once.
    """
    key = (name, dt, parallel, flags)
    fn = _COMPILED.get(key)
    if fn is None:
        with _LOCK, _file_lock():
            fn = _COMPILED.get(key)
            if fn is None:
                py, spec, opts = _KERNELS[name]
                if opts.get("parallel", False) and not parallel:
                    py = _serial_twin(py)
                opts = dict(opts, parallel=parallel and opts.get("parallel", False))
                fn = _COMPILED[key] = njit([_signature(spec, dt, flags)], **_OPTS, **opts)(py)
    return fn


def _serial_twin(py):
    """``py`` under another name, so that its serial variant has a disk-cache entry of its own.

    numba's cache is keyed on the function's name, source line and signature, not on
    ``parallel``: the serial variant compiled first under the same name would be loaded as the
    parallel one too (and the other way round).
    """
    f = pytypes.FunctionType(py.__code__, py.__globals__, py.__name__ + "_serial", py.__defaults__, py.__closure__)
    f.__qualname__ = py.__qualname__ + "_serial"
    f.__module__ = py.__module__
    f.__doc__ = py.__doc__
    return f


class _file_lock:
    """An exclusive ``flock`` on a lock file named after this module and numba's version (POSIX;
    elsewhere a no-op: numba's cache still works, each process may compile)."""

    def __enter__(self):
        import numba

        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows
            self.f = None
            return self
        tag = hashlib.sha1(f"{os.path.abspath(__file__)}:{numba.__version__}".encode()).hexdigest()[:16]
        self.f = open(os.path.join(tempfile.gettempdir(), f"scanarray-numba-{tag}.lock"), "a")
        fcntl.flock(self.f, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        if self.f is not None:
            import fcntl

            fcntl.flock(self.f, fcntl.LOCK_UN)
            self.f.close()


# --------------------------------------------------------------------------- small pieces


@njit(**_OPTS)
def _finite(x):
    """Whether ``x`` (real or complex) is finite: ``x - x`` is 0 only then."""
    return x - x == 0


@njit(**_OPTS)
def _scan(a, b, out, t0, t1, s, c):
    """The plain loop over ``t0..t1-1`` from state ``s``, storing ``c * s`` (``c = 1``: the states
    exactly); returns the last state. (The unscaled loop is its own: the product in the store cost
    a lone row 9-14%.)"""
    if c == 1:
        for t in range(t0, t1):
            s = a[t] * s + b[t]
            out[t] = s
        return s
    for t in range(t0, t1):
        s = a[t] * s + b[t]
        out[t] = s * c
    return s


@njit(**_OPTS)
def _reduce(a, b, t0, t1, p, s):
    """The loop over ``t0..t1-1`` without writing: (product of ``a`` times ``p``, last state)."""
    for t in range(t0, t1):
        s = a[t] * s + b[t]
        p = a[t] * p
    return p, s


@njit(**_OPTS)
def _split(bnd, s0, n, nseg):
    """Bounds of ``nseg`` near-equal segments of the ``n`` steps from ``s0`` (``bnd``: nseg + 1)."""
    for i in range(nseg + 1):
        bnd[i] = s0 + (n * i) // nseg


@njit(**_OPTS)
def _quad(bnd, i):
    """Starts of segments i..i+3 and the length ``m`` they all have (the interleaved part)."""
    u0, u1, u2, u3 = bnd[i], bnd[i + 1], bnd[i + 2], bnd[i + 3]
    return u0, u1, u2, u3, min(min(u1 - u0, u2 - u1), min(u3 - u2, bnd[i + 4] - u3))


@njit(**_OPTS)
def _fixup(a, out, t0, t1, w, tiny):
    """``out[t] += w_t`` with ``w_t = a[t] * w_{t-1}``, from ``t0`` until ``|w|`` drops below ``tiny``.

    ``w_t`` is the carry's share of the state, ``(a[t0] ... a[t]) * w``. Once
    both parts of ``w`` are below the smallest normal number it is noise
    beyond the last bit of any normal-sized state (the loop itself loses the
    carry to rounding far earlier); it cannot reach exactly 0 in general,
    since ``a * w`` rounds back to the smallest subnormal for ``|a| > 1/2``.
    NaN and infinities compare false and are carried to the end: from a
    non-finite ``w`` over finite local states this is the loop itself.
    """
    for t in range(t0, t1):
        w = a[t] * w
        if abs(w.real) < tiny and abs(w.imag) < tiny:
            return
        out[t] += w


@intrinsic
def _nt_store(typingctx, arr, idx, val):
    """``arr[idx] = val`` as a non-temporal store (``!nontemporal``: ``movnti``/``movntsd`` on x86).

    A plain store first reads its cache line from memory (write-allocate):
    writing ``out`` costs two units of traffic. A non-temporal store writes
    the line without reading it; consecutive ones fill whole lines in the
    write-combining buffers. For arrays far larger than the cache, which the
    next step has to re-read from memory anyway.
    """
    if not (isinstance(arr, types.Array) and isinstance(idx, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        aty = sig.args[0]
        ary = context.make_array(aty)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, aty, ary, [args[1]], wraparound=False)
        val = context.cast(builder, args[2], sig.args[2], aty.dtype)
        st = builder.store(val, ptr)
        st.set_metadata("nontemporal", builder.module.add_metadata([ir.Constant(ir.IntType(32), 1)]))
        return context.get_dummy_value()

    return types.void(arr, idx, val), codegen


@intrinsic
def _store_fence(typingctx):
    """A full fence: non-temporal stores are weakly ordered; other threads read ``out`` next."""

    def codegen(context, builder, sig, args):
        builder.fence("seq_cst")
        return context.get_dummy_value()

    return types.void(), codegen


@njit(**_OPTS)
def _put(src, dst, k, nt):
    """``dst[:k] = src[:k]``, with non-temporal stores if ``nt`` (a burst: whole cache lines)."""
    if nt:
        for u in range(k):
            _nt_store(dst, u, src[u])
    else:
        for u in range(k):
            dst[u] = src[u]


# --------------------------------------------------------------------------- sequential


@njit(**_OPTS)
def _rows4(a0, a1, a2, a3, b0, b1, b2, b3, o0, o1, o2, o3, T, s0, s1, s2, s3, c):
    """Four lanes stepped together: four independent dependency chains hide the latency of the
    multiply and the add that bound one lane (each lane is still exactly the plain loop); stores
    ``c * s`` (``c = 1`` stores the states exactly)."""
    for t in range(T):
        s0 = a0[t] * s0 + b0[t]
        s1 = a1[t] * s1 + b1[t]
        s2 = a2[t] * s2 + b2[t]
        s3 = a3[t] * s3 + b3[t]
        o0[t] = s0 * c
        o1[t] = s1 * c
        o2[t] = s2 * c
        o3[t] = s3 * c
    return s0, s1, s2, s3


@_kernel("r2 r2 w2 w1 b s", parallel=True)
def sequential_rows(a, b, out, h, four, c):
    """Lanes with a time axis of their own (rows), spread over the threads: for time-contiguous lanes.

    Each lane is the plain loop, so results (non-finite ones included) are exactly the loop's;
    it stores ``c * h`` (``Problem.scale``; ``c = 1`` stores ``h`` exactly) and carries ``h``.
    With ``four``, lanes go in groups of four stepped together (:func:`_rows4`).
    """
    L, T = out.shape
    ng = L // 4 if four else 0
    for g in prange(ng + L - 4 * ng):
        if g < ng:
            l = 4 * g
            h[l], h[l + 1], h[l + 2], h[l + 3] = _rows4(
                a[l], a[l + 1], a[l + 2], a[l + 3], b[l], b[l + 1], b[l + 2], b[l + 3],
                out[l], out[l + 1], out[l + 2], out[l + 3], T, h[l], h[l + 1], h[l + 2], h[l + 3], c)
        else:
            l = 3 * ng + g
            h[l] = _scan(a[l], b[l], out[l], 0, T, h[l], c)


@_kernel("r2 r2 w2 w1 i s", parallel=True)
def sequential_blocks(a, b, out, h, lb, c):
    """Blocks of ``lb`` lanes stepped together through time, on ``(T, lanes)`` views, storing
    ``c * h`` (``Problem.scale``; ``c = 1`` stores ``h`` exactly) and carrying ``h``.

    For time-major arrays (a ``(T, N)`` C-order array scanned along axis 0):
    step ``t`` of a block is one contiguous run of each of ``a``, ``b`` and
    ``out``, read in place with no transposing copy; the ``lb`` recurrences
    of a block are independent, so the inner loop has no dependency chain
    and vectorises. Two steps per pass over the block: four runs read at
    once, and the state stays in a register between the two. ``a`` and
    ``b`` here are the transposed canonical views, ``(T, lanes)``.
    """
    T, L = out.shape
    nblk = (L + lb - 1) // lb
    for k in prange(nblk):
        l0 = k * lb
        n = min(L, l0 + lb) - l0
        s = h[l0:l0 + n].copy()
        for t in range(0, T - 1, 2):
            a0, b0, o0 = a[t, l0:l0 + n], b[t, l0:l0 + n], out[t, l0:l0 + n]
            a1, b1, o1 = a[t + 1, l0:l0 + n], b[t + 1, l0:l0 + n], out[t + 1, l0:l0 + n]
            for j in range(n):
                v = a0[j] * s[j] + b0[j]
                o0[j] = v * c
                v = a1[j] * v + b1[j]
                s[j] = v
                o1[j] = v * c
        if T % 2:
            _scan_lanes(a[T - 1, l0:l0 + n], b[T - 1, l0:l0 + n], out[T - 1, l0:l0 + n], s, c)
        h[l0:l0 + n] = s


@_kernel("r2 r2 w2 r2 w2", parallel=True)
def adjoint_rows(a, g, lam, h, ga):
    """The adjoint of the scan along ``t = 0..T-1`` of ``(lanes, T)`` views, in one pass backwards:
    ``lam[t] = g[t] + a[t+1] lam[t+1]`` from ``lam[T-1] = g[T-1]`` (grad_b), and ``ga[t] = lam[t]
    h[t-1]`` with ``ga[0] = 0`` (grad_a; the initial state's term is the caller's). A reversed
    scan passes reversed views."""
    L, T = lam.shape
    for l in prange(L):
        al, gl, ll, hl, gal = a[l], g[l], lam[l], h[l], ga[l]
        s = gl[T - 1]
        ll[T - 1] = s
        for t in range(T - 2, -1, -1):
            gal[t + 1] = s * hl[t]
            s = al[t + 1] * s + gl[t]
            ll[t] = s
        gal[0] = 0


@_kernel("r2 r2 w2 r2 w2 i", parallel=True)
def adjoint_blocks(a, g, lam, h, ga, lb):
    """:func:`adjoint_rows` on ``(T, lanes)`` views (time-major data), blocks of ``lb`` lanes
    stepped together backwards through time (as :func:`sequential_blocks`)."""
    T, L = lam.shape
    for k in prange((L + lb - 1) // lb):
        l0 = k * lb
        l1 = min(L, l0 + lb)
        for j in range(l0, l1):
            lam[T - 1, j] = g[T - 1, j]
        for t in range(T - 2, -1, -1):
            a1, g0, l0_, l1_, h0, ga1 = a[t + 1], g[t], lam[t], lam[t + 1], h[t], ga[t + 1]
            for j in range(l0, l1):
                s = l1_[j]
                ga1[j] = s * h0[j]
                l0_[j] = a1[j] * s + g0[j]
        for j in range(l0, l1):
            ga[0, j] = 0


@njit(**_OPTS)
def _scan_lanes(a, b, out, s, c):
    """One step of independent lanes: ``s = a * s + b``, ``c * s`` written to ``out``."""
    for j in range(s.shape[0]):
        v = a[j] * s[j] + b[j]
        s[j] = v
        out[j] = v * c


# --------------------------------------------------------------------------- chunked along time


#: steps between two flushes of the reduce scheme's products (a few subnormal multiplies at most)
_FLUSH_EVERY = 1024


@njit(**_OPTS)
def _flush4(p0, p1, p2, p3, small):
    """Products of ``a`` below the smallest normal ``small`` as zero: for ``|a|`` in (0.5, 1) a
    product decays to the smallest subnormal and stays there (``x * 0.7`` rounds back to it), and
    every later multiply would take the processor's slow subnormal path. The carry's share they
    drop is below ``small * |carry|``, where the subnormal product was itself off by that much."""
    zero = p0 - p0
    return (zero if abs(p0) < small else p0, zero if abs(p1) < small else p1,
            zero if abs(p2) < small else p2, zero if abs(p3) < small else p3)


@njit(**_OPTS)
def _quarters(x, u0, u1, u2, u3, m):
    """The four segments' first ``m`` steps of row ``x``, as views starting at index 0."""
    return x[u0:u0 + m], x[u1:u1 + m], x[u2:u2 + m], x[u3:u3 + m]


@njit(**_OPTS)
def _reduce_group(ar, br, bnd, i, one, small, P, H):
    """Pass 1 of the reduce-then-scan scheme for segments ``i .. i+3``: each segment's aggregate
    ``(P, H)`` = (product of ``a``, state from zero), the four stepped interleaved (8 independent
    chains). Rows are 1-d views sliced so that the loop index starts at 0 (indexing ``ar[u0 +
    j]`` with an offset read from an array measured 2x slower: numba's negative-index wraparound
    check cannot be proven away). Products below ``small`` are flushed to zero after each burst
    (as in :func:`_local_group`: a subnormal product would stay subnormal)."""
    u0, u1, u2, u3, m = _quad(bnd, i)
    zero = one - one
    p0 = p1 = p2 = p3 = one
    q0 = q1 = q2 = q3 = zero
    a0, a1, a2, a3 = _quarters(ar, u0, u1, u2, u3, m)
    b0, b1, b2, b3 = _quarters(br, u0, u1, u2, u3, m)
    for j0 in range(0, m, _FLUSH_EVERY):
        for j in range(j0, min(m, j0 + _FLUSH_EVERY)):
            x0, x1, x2, x3 = a0[j], a1[j], a2[j], a3[j]
            q0, q1, q2, q3 = x0 * q0 + b0[j], x1 * q1 + b1[j], x2 * q2 + b2[j], x3 * q3 + b3[j]
            p0, p1, p2, p3 = x0 * p0, x1 * p1, x2 * p2, x3 * p3
        p0, p1, p2, p3 = _flush4(p0, p1, p2, p3, small)
    P[i], H[i] = _reduce(ar, br, u0 + m, u1, p0, q0)
    P[i + 1], H[i + 1] = _reduce(ar, br, u1 + m, u2, p1, q1)
    P[i + 2], H[i + 2] = _reduce(ar, br, u2 + m, u3, p2, q2)
    P[i + 3], H[i + 3] = _reduce(ar, br, u3 + m, bnd[i + 4], p3, q3)


@njit(**_OPTS)
def _rescan_group(ar, br, orow, bnd, i, C, one):
    """Pass 2 of the reduce-then-scan scheme for segments ``i .. i+3``: the plain loop again from
    each segment's carry ``C[i]``; returns the last segment's final state (the loop's own)."""
    u0, u1, u2, u3, m = _quad(bnd, i)
    a0, a1, a2, a3 = _quarters(ar, u0, u1, u2, u3, m)
    b0, b1, b2, b3 = _quarters(br, u0, u1, u2, u3, m)
    o0, o1, o2, o3 = _quarters(orow, u0, u1, u2, u3, m)
    q0, q1, q2, q3 = _rows4(a0, a1, a2, a3, b0, b1, b2, b3, o0, o1, o2, o3, m, C[i], C[i + 1], C[i + 2], C[i + 3],
                            one)
    _scan(ar, br, orow, u0 + m, u1, q0, one)
    _scan(ar, br, orow, u1 + m, u2, q1, one)
    _scan(ar, br, orow, u2 + m, u3, q2, one)
    return _scan(ar, br, orow, u3 + m, bnd[i + 4], q3, one)


@njit(**_OPTS)
def _carries(ar, br, bnd, P, H, C, c, one):
    """``C[i]``: the state entering segment ``i`` of a reduced superblock (``C[0] = c``).

    ``C[i+1] = P[i] C[i] + H[i]`` where all three are finite. Otherwise the loop runs over the
    segment from ``C[i]`` (reading ``a`` and ``b``, writing nothing): an infinity met inside a
    segment, or entering it, takes the loop's sign and NaNs, not the composition's.
    """
    C[0] = c
    for i in range(P.shape[0]):
        if _finite(P[i]) and _finite(H[i]) and _finite(C[i]):
            C[i + 1] = P[i] * C[i] + H[i]
        else:
            C[i + 1] = _reduce(ar, br, bnd[i], bnd[i + 1], one, C[i])[1]


@njit(fastmath={"contract"}, **_OPTS)
def _local4(a0, a1, a2, a3, b0, b1, b2, b3, o0, o1, o2, o3, m, p0, p1, p2, p3, q0, q1, q2, q3):
    """Four segments' local scans interleaved, written to ``o*``; returns the products of ``a`` and last states.

    ``contract`` lets LLVM fuse ``x * q + b`` into one FMA (one rounding
    instead of two; the latency of the chain drops from a multiply plus an add).
    """
    for j in range(m):
        x0, x1, x2, x3 = a0[j], a1[j], a2[j], a3[j]
        q0, q1, q2, q3 = x0 * q0 + b0[j], x1 * q1 + b1[j], x2 * q2 + b2[j], x3 * q3 + b3[j]
        o0[j], o1[j], o2[j], o3[j] = q0, q1, q2, q3
        p0, p1, p2, p3 = x0 * p0, x1 * p1, x2 * p2, x3 * p3
    return p0, p1, p2, p3, q0, q1, q2, q3


@njit(fastmath={"contract"}, **_OPTS)
def _local4_const(x, b0, b1, b2, b3, o0, o1, o2, o3, m, q0, q1, q2, q3):
    """:func:`_local4` for a time-invariant ``a = x`` (the products are ``x ** m``)."""
    for j in range(m):
        q0, q1, q2, q3 = x * q0 + b0[j], x * q1 + b1[j], x * q2 + b2[j], x * q3 + b3[j]
        o0[j], o1[j], o2[j], o3[j] = q0, q1, q2, q3
    return q0, q1, q2, q3


@njit(**_OPTS)
def _tail(a, b, out, t0, t1, p, q, stop, end):
    """The steps of a segment past the interleaved part (at most one): written while finite."""
    for t in range(t0, t1):
        x = a[t]
        q = x * q + b[t]
        p = x * p
        if stop == end:
            if _finite(q):
                out[t] = q
            else:
                stop = t
    return p, q, stop


@njit(**_OPTS)
def _keep(r, o, k, nt, direct, q, stop, end, start):
    """After a burst of a segment ending in state ``q``: the segment's new ``stop`` (``start`` if
    ``q`` is the first non-finite end state), the burst ``r[:k]`` written to ``o`` while finite
    (unless ``direct``: it is there already)."""
    if stop == end:
        if not _finite(q):
            return start
        if not direct:
            _put(r, o, k, nt)
    return stop


#: Compile-time constants of pass 1 (constant trip counts: a runtime burst length cost 10-20%).
#: Steps per burst collected in the L1 buffer: 512 bytes of float64 per segment, whole lines for
#: non-temporal stores (single stores from the interleaved loop did not fill them: 2.5x slower).
_BURST = 64
#: Steps between the finiteness checks when pass 1 writes straight to ``out``: checks every 64
#: steps cost 18% of a 2**24-step row, every 4096 nothing measurable.
_DIRECT_BURST = 4096


@njit(**_OPTS)
def _local_group(ar, br, orow, bnd, i, q0, one, nt, direct, P, H, stop, small):
    """Pass 1 of :func:`chunked`'s fix-up scheme for segments ``i .. i+3``: local scans written to ``out``.

    The four segments step interleaved in bursts (``_BURST`` steps). A non-finite state stays
    non-finite to the segment's end, so the first burst that ends non-finite marks where the
    segment needs the loop (``stop``). Its values must not reach ``out`` when ``out`` is ``b``
    (the loop reads ``b`` from there) or with non-temporal stores: then each burst is collected
    in an L1 buffer and written out (non-temporally if ``nt``) only while finite. Otherwise
    (``direct``) the states go straight to ``out``, and the loop overwrites what follows ``stop``.

    Products below ``small`` are flushed to zero after each burst (:func:`_flush4`).
    """
    zero = one - one
    u0, u1, u2, u3, m = _quad(bnd, i)
    e0, e1, e2, e3 = bnd[i + 1], bnd[i + 2], bnd[i + 3], bnd[i + 4]
    st0, st1, st2, st3 = e0, e1, e2, e3
    q1 = q2 = q3 = zero
    p0 = p1 = p2 = p3 = one
    burst = _DIRECT_BURST if direct else _BURST
    buf = np.empty((4, _BURST), orow.dtype)
    r0, r1, r2, r3 = buf[0], buf[1], buf[2], buf[3]
    b0, b1, b2, b3 = _quarters(br, u0, u1, u2, u3, m)
    o0, o1, o2, o3 = _quarters(orow, u0, u1, u2, u3, m)
    const = ar.strides[0] == 0
    # time-invariant a (scalar or per lane): a register, not a load per step
    x = ar[0] if const and ar.shape[0] > 0 else one
    a0, a1, a2, a3 = _quarters(ar, u0, u1, u2, u3, m)
    mb = m - m % burst
    for j in range(0, m, burst):
        e = min(m, j + burst)
        k = burst if j < mb else m - mb
        if direct:
            if const:
                q0, q1, q2, q3 = _local4_const(x, b0[j:e], b1[j:e], b2[j:e], b3[j:e], o0[j:e], o1[j:e], o2[j:e],
                                               o3[j:e], k, q0, q1, q2, q3)
            else:
                p0, p1, p2, p3, q0, q1, q2, q3 = _local4(a0[j:e], a1[j:e], a2[j:e], a3[j:e], b0[j:e], b1[j:e],
                                                         b2[j:e], b3[j:e], o0[j:e], o1[j:e], o2[j:e], o3[j:e], k,
                                                         p0, p1, p2, p3, q0, q1, q2, q3)
        else:
            if const:
                q0, q1, q2, q3 = _local4_const(x, b0[j:e], b1[j:e], b2[j:e], b3[j:e], r0, r1, r2, r3, k,
                                               q0, q1, q2, q3)
            else:
                p0, p1, p2, p3, q0, q1, q2, q3 = _local4(a0[j:e], a1[j:e], a2[j:e], a3[j:e], b0[j:e], b1[j:e],
                                                         b2[j:e], b3[j:e], r0, r1, r2, r3, k, p0, p1, p2, p3,
                                                         q0, q1, q2, q3)
        p0, p1, p2, p3 = _flush4(p0, p1, p2, p3, small)
        st0 = _keep(r0, o0[j:e], k, nt, direct, q0, st0, e0, u0 + j)
        st1 = _keep(r1, o1[j:e], k, nt, direct, q1, st1, e1, u1 + j)
        st2 = _keep(r2, o2[j:e], k, nt, direct, q2, st2, e2, u2 + j)
        st3 = _keep(r3, o3[j:e], k, nt, direct, q3, st3, e3, u3 + j)
    if nt:
        _store_fence()
    if const:
        p0 = p1 = p2 = p3 = x ** m
    P[i], H[i], stop[i] = _tail(ar, br, orow, u0 + m, e0, p0, q0, st0, e0)
    P[i + 1], H[i + 1], stop[i + 1] = _tail(ar, br, orow, u1 + m, e1, p1, q1, st1, e1)
    P[i + 2], H[i + 2], stop[i + 2] = _tail(ar, br, orow, u2 + m, e2, p2, q2, st2, e2)
    P[i + 3], H[i + 3], stop[i + 3] = _tail(ar, br, orow, u3 + m, e3, p3, q3, st3, e3)


@njit(**_OPTS)
def _carries_fixup(ar, br, orow, bnd, P, H, C, stop, exact, c, tiny, one):
    """``C[i]``: the state entering segment ``i`` after pass 1 of :func:`chunked`'s fix-up scheme (``C[0] = c``).

    A segment written in full whose carry is finite composes: ``C[i+1] = P[i] C[i] + H[i]``
    (segment 0 started from ``c``: ``H[0]``), and pass 2 adds the carry's share. Any other
    segment is finished here, serially, as the loop would: the carry's share is added over its
    written part (:func:`_fixup`, which is the loop itself from a non-finite carry), and the
    loop runs from there over the part pass 1 left unwritten, reading ``b``. Such segments are
    ``exact`` and pass 2 skips them.
    """
    C[0] = c
    for i in range(P.shape[0]):
        u, e, st = bnd[i], bnd[i + 1], stop[i]
        if st == e and (i == 0 or _finite(C[i])):
            C[i + 1] = H[0] if i == 0 else P[i] * C[i] + H[i]
            exact[i] = False
        else:
            if i == 0:
                s = orow[st - 1] if st > u else c
            else:
                _fixup(ar, orow, u, st, C[i], tiny)
                s = orow[st - 1] if st > u else C[i]
            C[i + 1] = _scan(ar, br, orow, st, e, s, one)
            exact[i] = True


@_kernel("r2 r2 w2 w1 i i r1 t1 b b b", parallel=True)
def chunked(a, b, out, h, ng, sb, unit, tiny, fixup, nt, direct):
    """Few long lanes over every thread: each lane cut into superblocks of ``sb`` steps, each
    superblock into ``4 * ng`` segments; thread ``g`` takes segments ``4g .. 4g+3`` and steps
    them interleaved (4 independent dependency chains hide the latency of the multiply-add that
    bounds a single loop). Two schemes (the driver picks, ``fixup``):

    - *Scan, then fix up*: pass 1 (:func:`_local_group`) scans every segment from state 0 -- the
      first from the true incoming state, so it is final -- writing the local states into
      ``out`` and keeping the aggregate ``(P, H)`` = (product of ``a``, last local state). A
      serial scan of the aggregates (:func:`_carries_fixup`) gives each segment's carry ``C``.
      Pass 2 adds the carry's share, ``out[t] += (a[u] ... a[t]) * C``, to every later segment,
      and stops where that share falls below the smallest normal number (:func:`_fixup`): for
      ``|a| < 1`` after a few thousand steps. Memory then sees one read of ``a`` and ``b`` and one
      write of ``out`` (3 streams); where the share never decays pass 2 re-reads ``a`` and ``out``
      and writes ``out`` in full: 6 streams.
    - *Reduce, then scan* (for a time-invariant ``a`` with ``|a|`` near or above 1, where the
      fix-up would rewrite every later segment): pass 1 reduces every segment to its aggregate
      (:func:`_reduce_group`, reading ``a`` and ``b``); :func:`_carries` gives each segment's
      incoming state (by the loop itself where an aggregate or a carry is not finite); pass 2
      rescans every segment from it (:func:`_rescan_group`): 5 streams.

    ``h`` gets the lane's last state. ``unit`` is ``[1]`` in the accumulation dtype, ``tiny`` the
    smallest normal number of its real part (``[tiny]``). ``nt``: pass 1 writes ``out`` with
    non-temporal stores (real dtypes with contiguous rows far larger than the cache: the driver
    decides); ``direct``: pass 1 may write ``out`` straight from the loop (``out`` is not ``b``,
    no ``nt``; see :func:`_local_group`).
    """
    L, T = out.shape
    nseg = 4 * ng
    P = np.empty(nseg, h.dtype)
    H = np.empty(nseg, h.dtype)
    C = np.empty(nseg + 1, h.dtype)
    bnd = np.empty(nseg + 1, np.int64)
    stop = np.empty(nseg, np.int64)
    exact = np.empty(nseg, np.bool_)
    small = tiny[0]
    one = unit[0]
    for l in range(L):
        ar = a[l]
        br = b[l]
        orow = out[l]
        c = h[l]
        for s0 in range(0, T, sb):
            n = min(T, s0 + sb) - s0
            _split(bnd, s0, n, nseg)
            if fixup:
                for g in prange(ng):
                    i = 4 * g
                    _local_group(ar, br, orow, bnd, i, c if i == 0 else one - one, one, nt, direct, P, H, stop, small)
                _carries_fixup(ar, br, orow, bnd, P, H, C, stop, exact, c, small, one)
                for g in prange(ng):
                    for i in range(max(1, 4 * g), 4 * g + 4):
                        if not exact[i]:
                            _fixup(ar, orow, bnd[i], bnd[i + 1], C[i], small)
                if n > 0:
                    c = orow[s0 + n - 1]
            else:
                for g in prange(ng):
                    _reduce_group(ar, br, bnd, 4 * g, one, small, P, H)
                _carries(ar, br, bnd, P, H, C, c, one)
                for g in prange(ng):
                    last = _rescan_group(ar, br, orow, bnd, 4 * g, C, one)
                    if g == ng - 1:
                        C[nseg] = last  # the loop's own last state, not the composition's
                c = C[nseg]
        h[l] = c


# --------------------------------------------------------------------------- filters


@_kernel("r2 r2 w3 w2", parallel=True)
def sos_cascade(sos, x, z, y):
    """Second-order sections in cascade over lanes ``x (L, T)`` into ``y``: SciPy's ``sosfilt``
    loop (transposed direct form II, its order of operations) on every lane, all sections per
    sample, so the signal is read once and written once. ``sos (n, 6)`` normalised (``a0 =
    1``); ``z (L, n, 2)``: the delays, in and out."""
    L, T = x.shape
    n = sos.shape[0]
    for l in prange(L):
        xl, yl, zl = x[l], y[l], z[l]
        for t in range(T):
            v = xl[t]
            for s in range(n):
                w = sos[s, 0] * v + zl[s, 0]
                zl[s, 0] = sos[s, 1] * v - sos[s, 4] * w + zl[s, 1]
                zl[s, 1] = sos[s, 2] * v - sos[s, 5] * w
                v = w
            yl[t] = v


@_kernel("r1 r1 r2 w2 w2", parallel=True)
def lfilter_df2t(b, a, x, z, y):
    """SciPy's ``lfilter`` loop (transposed direct form II, its order of operations) over lanes
    ``x (L, T)`` into ``y``: ``b``, ``a`` of length ``K + 1`` normalised (``a[0] = 1``), ``K >=
    1``; ``z (L, K)``: the delays, in and out. (Beside ``sos_cascade``, not merged with it: each
    keeps its SciPy function's order of operations, and one kernel for both, the section's order
    a run-time number, measured 18-26% slower on both filters, 2-core VM.)"""
    L, T = x.shape
    K = z.shape[1]
    for l in prange(L):
        xl, yl, zl = x[l], y[l], z[l]
        for t in range(T):
            v = xl[t]
            w = zl[0] + b[0] * v
            for n in range(K - 1):
                zl[n] = zl[n + 1] + v * b[n + 1] - w * a[n + 1]
            zl[K - 1] = v * b[K] - w * a[K]
            yl[t] = w


# --------------------------------------------------------------------------- dense


@njit(**_OPTS)
def _matvec_columns(At, bt, s, v, n):
    """``v = A @ s + bt`` with ``At = A.T`` contiguous: one column of ``A`` at a time.

    The inner loop runs over rows along a contiguous column and carries no dependency, so it
    vectorises; each ``v[i]`` still sums ``bt[i] + A[i, 0] s[0] + A[i, 1] s[1] + ...`` in the
    plain loop's order, so the result is the loop's to the bit.
    """
    for i in range(n):
        v[i] = bt[i]
    for j in range(n):
        sj = s[j]
        col = At[j]
        for i in range(n):
            v[i] += col[i] * sj


@njit(**_OPTS)
def _matvec_rows(M, bt, s, v, n):
    """``v = M @ s + bt`` reading ``M`` row by row (contiguous reads of a time-varying ``A``).

    Eight rows at a time: eight independent sums in flight hide the latency of the multiply and
    the add that bound one row's sum (four were as fast at n = 16, slower at n = 64). Each sum is
    in the plain loop's order.
    """
    i = 0
    while i + 8 <= n:
        r0, r1, r2, r3, r4, r5, r6, r7 = M[i], M[i + 1], M[i + 2], M[i + 3], M[i + 4], M[i + 5], M[i + 6], M[i + 7]
        c0, c1, c2, c3, c4, c5, c6, c7 = bt[i], bt[i + 1], bt[i + 2], bt[i + 3], bt[i + 4], bt[i + 5], bt[i + 6], bt[i + 7]
        for j in range(n):
            sj = s[j]
            c0 += r0[j] * sj
            c1 += r1[j] * sj
            c2 += r2[j] * sj
            c3 += r3[j] * sj
            c4 += r4[j] * sj
            c5 += r5[j] * sj
            c6 += r6[j] * sj
            c7 += r7[j] * sj
        v[i], v[i + 1], v[i + 2], v[i + 3], v[i + 4], v[i + 5], v[i + 6], v[i + 7] = c0, c1, c2, c3, c4, c5, c6, c7
        i += 8
    while i < n:
        r0 = M[i]
        c0 = bt[i]
        for j in range(n):
            c0 += r0[j] * s[j]
        v[i] = c0
        i += 1


@_kernel("r4 r3 w3 w2", parallel=True)
def dense_sequential(A, b, out, h):
    """``h[t] = A[t] @ h[t-1] + b[t]`` step by step, one lane per iteration.

    ``A (L, T, n, n)`` may be broadcast (stride 0 along time for a time-invariant matrix); ``T
    n^2`` multiply-adds per lane against cyclic reduction's ``~T n^3``. A time-invariant matrix
    is copied transposed once per lane and applied a column at a time (:func:`_matvec_columns`:
    vectorised); a time-varying one is read in place, eight rows at a time
    (:func:`_matvec_rows`). Either way each state is the plain loop's to the bit.
    """
    L, T, n = out.shape
    for l in prange(L):
        s = h[l].copy()
        v = np.empty_like(s)
        if A.strides[1] == 0 and T > 1:
            At = np.ascontiguousarray(A[l, 0].T)
            for t in range(T):
                _matvec_columns(At, b[l, t], s, v, n)
                o = out[l, t]
                for i in range(n):
                    s[i] = v[i]
                    o[i] = v[i]
        else:
            for t in range(T):
                _matvec_rows(A[l, t], b[l, t], s, v, n)
                o = out[l, t]
                for i in range(n):
                    s[i] = v[i]
                    o[i] = v[i]
        h[l] = s


# --------------------------------------------------------------------------- exponentially weighted mean


@_kernel("r2 w2 s b b b i", parallel=True, fastmath={"contract"})
def ewm_mean_rows(x, out, g, ignore_na, adjust, quirk, minp):
    """pandas' ``ewm(adjust=...).mean()`` along each lane of ``x (L, T)``, one pass: the weighted
    sum ``N`` and weight sum ``W`` at the last observation, the decay ``P`` of the steps since it
    (``g`` a step; observed steps only with ``ignore_na``) applied at the next one, so the mean in
    a gap is the last one exactly (as ``cuda/ewm.cu``, docs/guide/ewm.md); NaN until ``minp``
    observations. ``adjust=False`` weighs an observation ``1 - g`` against the last mean's weight
    1, decayed (pandas' ``old_wt`` reset at each observation): ``N, W = d m + (1 - g) v, d + 1 - g``;
    with ``quirk`` (pandas' ``com == 1`` rule, ``_ewm._Ewm.mean``) the observation weighs ``1 - d``.
    Lanes are shared by the threads; multiply-adds are fused (``contract``: the sums' chain of a
    multiply and an add a step is the loop's latency; docs/guide/ewm.md). In a long gap ``P``
    sinks to a subnormal number that ``g`` no longer moves (or to zero), where each product costs
    a hundred normal ones on x86: from there on the gap's steps skip it (``stuck``), the same
    bits."""
    L, T = x.shape
    one = np.ones(1, x.dtype)[0]
    zero = one - one
    nw = one if adjust else one - g  # pandas' new_wt
    nan = np.full(1, np.nan, x.dtype)[0]
    for l in prange(L):
        xr = x[l]
        orow = out[l]
        N = W = zero
        P = one
        cnt = 0
        m = nan
        stuck = False
        for t in range(T):
            v = xr[t]
            if v == v:
                d = P * g
                if adjust or cnt == 0:
                    N = d * N + nw * v
                    W = d * W + nw
                else:
                    w = one - d if quirk else nw
                    N = d * (N / W) + w * v
                    W = d + w
                P = one
                stuck = False
                cnt += 1
                m = N / W if cnt >= minp else nan
            elif not (ignore_na or stuck):
                q = P * g
                stuck = q == P
                P = q
            orow[t] = m


@_kernel("r2 w2 i s b b b i", parallel=True)
def ewm_mean_blocks(x, out, lb, g, ignore_na, adjust, quirk, minp):
    """:func:`ewm_mean_rows` on time-major ``(T, L)`` views: blocks of ``lb`` lanes stepped together
    through time, each step one contiguous run of ``x`` and ``out`` (no transposing copy), the
    update written as selects so that the loop over a block's lanes vectorises."""
    T, L = x.shape
    nblk = (L + lb - 1) // lb
    one = np.ones(1, x.dtype)[0]
    nan = np.full(1, np.nan, x.dtype)[0]
    zero = one - one
    gap = one if ignore_na else g  # a missing step's decay
    nw = one if adjust else one - g  # pandas' new_wt
    for k in prange(nblk):
        l0 = k * lb
        n = min(L, l0 + lb) - l0
        N = np.zeros(n, x.dtype)
        W = np.zeros(n, x.dtype)
        P = np.ones(n, x.dtype)
        cnt = np.zeros(n, np.int64)
        for t in range(T):
            xr = x[t, l0:l0 + n]
            orow = out[t, l0:l0 + n]
            for j in range(n):
                v = xr[j]
                o = v == v
                d = P[j] * g
                # adjust=False: the last mean with weight 1 (none before the first observation)
                w0 = W[j] if adjust else (one if cnt[j] > 0 else zero)
                n0 = N[j] if adjust else (N[j] / W[j] if cnt[j] > 0 else zero)
                w = one - d if (quirk and cnt[j] > 0) else nw
                Nj = d * n0 + w * v if o else N[j]
                Wj = d * w0 + w if o else W[j]
                c = cnt[j] + (1 if o else 0)
                N[j] = Nj
                W[j] = Wj
                P[j] = one if o else P[j] * gap
                cnt[j] = c
                orow[j] = Nj / Wj if c >= minp else nan


@njit(**_OPTS, fastmath={"contract"})
def _var_step(v, m, cov, S, S2, Wo, D, cnt, g, nw, ignore_na, adjust, minp, bias, tiny, one, nan):
    """One step of pandas' ``ewmcov`` update (``ewm(...).var()``) with scanarray's numerics
    (``_ewm._Ewm.var``): the new variance term ``c k (x - m_old)**2`` (one square, no cancellation)
    and ``S**2 - S2`` by its own recurrence ``D`` of non-negative terms. Returns the new state
    ``(m, cov, S, S2, Wo, D, cnt)`` and the output. The weights ``c``, ``k`` come from one
    reciprocal, and the mean's update is ``c m + k x``: no division on the chain of dependent
    steps, where pandas divides ``old_wt m + new_wt x`` (docs/guide/ewm.md)."""
    o = v == v
    if cnt > 0:
        if o or not ignore_na:
            S = S * g
            S2 = S2 * (g * g)
            Wo = Wo * g
            D = D * (g * g)
        if o:
            r = one / (Wo + nw)
            c = Wo * r
            k = nw * r
            dx = v - m
            if m != v:
                m = c * m + k * v
            cov = c * cov + (c * k) * (dx * dx)
            D = D + (nw + nw) * S
            S = S + nw
            S2 = S2 + nw * nw
            Wo = Wo + nw
            if not adjust:
                S = S / Wo
                S2 = S2 / (Wo * Wo)
                D = D / (Wo * Wo)
                Wo = one
    elif o:
        m = v
    if o:
        cnt += 1
    if cnt < minp:
        return m, cov, S, S2, Wo, D, cnt, nan
    if bias:
        return m, cov, S, S2, Wo, D, cnt, cov
    num = S * S
    den = num - S2
    if not den > 0:  # pandas' rule decides where it is NaN
        return m, cov, S, S2, Wo, D, cnt, nan
    return m, cov, S, S2, Wo, D, cnt, (num / (D if num > tiny and D > 0 else den)) * cov


@_kernel("r2 w2 s s b b i b s", parallel=True, fastmath={"contract"})
def ewm_var_rows(x, out, g, nw, ignore_na, adjust, minp, bias, tiny):
    """pandas' ``ewm(...).var(bias=...)`` along each lane of ``x (L, T)`` in one pass
    (:func:`_var_step`; ``nw`` pandas' ``new_wt``, ``minp >= 1``; ``S**2`` below ``tiny`` takes
    pandas' own difference). Lanes are shared by the threads."""
    L, T = x.shape
    one = np.ones(1, x.dtype)[0]
    nan = np.full(1, np.nan, x.dtype)[0]
    for l in prange(L):
        m = cov = D = one - one
        S = S2 = Wo = one
        cnt = 0
        y = nan
        stuck = False  # a missing step left the state as it was: so will every one after it
        for t in range(T):
            v = x[l, t]
            if v == v:
                m, cov, S, S2, Wo, D, cnt, y = _var_step(v, m, cov, S, S2, Wo, D, cnt, g, nw, ignore_na, adjust, minp,
                                                         bias, tiny, one, nan)
                stuck = False
            elif not stuck:  # (long gaps: their decays at subnormal fixed points cost x86 dearly)
                # (a path of its own: the observed steps' loop keeps no copies of the state)
                S0, S20, Wo0, D0 = S, S2, Wo, D
                m, cov, S, S2, Wo, D, cnt, y = _var_step(v, m, cov, S, S2, Wo, D, cnt, g, nw, ignore_na, adjust, minp,
                                                         bias, tiny, one, nan)
                stuck = S == S0 and S2 == S20 and Wo == Wo0 and D == D0
            out[l, t] = y


@_kernel("r2 w2 i s s b b i b s", parallel=True, fastmath={"contract"})
def ewm_var_blocks(x, out, lb, g, nw, ignore_na, adjust, minp, bias, tiny):
    """:func:`ewm_var_rows` on time-major ``(T, L)`` views, blocks of ``lb`` lanes stepped together
    through time (each step one contiguous run of ``x`` and ``out``); a lane in a long gap skips
    its stuck decays as there."""
    T, L = x.shape
    nblk = (L + lb - 1) // lb
    one = np.ones(1, x.dtype)[0]
    nan = np.full(1, np.nan, x.dtype)[0]
    for k in prange(nblk):
        l0 = k * lb
        n = min(L, l0 + lb) - l0
        st = np.zeros((6, n), x.dtype)  # m, cov, D, S, S2, Wo
        st[3:] = one
        cnt = np.zeros(n, np.int64)
        last = np.full(n, nan, x.dtype)
        stuck = np.zeros(n, np.bool_)
        for t in range(T):
            xr = x[t, l0:l0 + n]
            orow = out[t, l0:l0 + n]
            for j in range(n):
                v = xr[j]
                if v != v and stuck[j]:
                    orow[j] = last[j]
                    continue
                D0, S0, S20, Wo0 = st[2, j], st[3, j], st[4, j], st[5, j]
                st[0, j], st[1, j], st[3, j], st[4, j], st[5, j], st[2, j], cnt[j], y = _var_step(
                    v, st[0, j], st[1, j], S0, S20, Wo0, D0, cnt[j], g, nw, ignore_na, adjust, minp, bias, tiny,
                    one, nan)
                orow[j] = y
                last[j] = y
                stuck[j] = v != v and st[2, j] == D0 and st[3, j] == S0 and st[4, j] == S20 and st[5, j] == Wo0


# --------------------------------------------------------------------------- GAE and discounted returns


@njit(**_OPTS, inline="always")
def _gae_step(r, vt, d, nvt, term, nv, last, g, gl, has_v, has_nv, has_term, one):
    """One step of :func:`gae_rows`: ``(advantage, value after the step before)``, the loop's
    operations in its order. ``nv``: the value after this step (``v[t+1]``, or the bootstrap).
    GAE (``has_v``): the TD residual bootstraps from ``next_values[t]`` (``nvt``, ``has_nv``) and,
    with ``terminated``, wherever the step did not terminate. Returns (no values, ``gl = gamma``):
    the reward, plus ``gamma`` times the next value at truncated steps (done, not terminated)."""
    nt = one - d
    x = vt if has_v else one - one
    # (selects on the call's flags, not branches: the blocks' loop over lanes stays vectorised)
    nxt = nvt if has_v and has_nv else nv
    boots = one - term if has_v and has_term else nt
    rr = r + (g * (d * (one - term))) * nvt if has_term and not has_v else r
    return ((g * nxt) * boots + rr - x) + (gl * nt) * last, x


@_kernel("r2 r2 f2 r2 f2 w2 r1 s s b b b", parallel=True)
def gae_rows(r, v, d, nvals, term, out, boot, g, gl, has_v, has_nv, has_term):
    """GAE's advantages along each lane of ``(L, T)`` views, backwards in one pass: the loop of
    CleanRL and Stable-Baselines3 (``scanarray.rl.gae``), its operations in its order, so the
    results are its own to the bit (:func:`_gae_step`). ``boot`` (one per lane) is the value
    after the last step, ``gl = gamma * lam``; ``nvals``, ``term``: ``next_values`` and
    ``terminated`` where ``has_nv``, ``has_term`` (else not read). Without values (``has_v``
    false: ``v`` is not read) and with ``gl = gamma`` these are the discounted returns,
    bootstrapped by ``boot``."""
    L, T = out.shape
    one = np.ones(1, out.dtype)[0]
    for l in prange(L):
        rl, vl, dl, nl, tl, ol = r[l], v[l], d[l], nvals[l], term[l], out[l]
        nv = boot[l]  # the value after step t
        last = one - one
        if has_nv or has_term:
            for t in range(T - 1, -1, -1):
                last, nv = _gae_step(rl[t], vl[t], dl[t], nl[t], tl[t], nv, last, g, gl, has_v, has_nv, has_term, one)
                ol[t] = last
        else:  # (_gae_step without truncations, written out: the chain a step is the loop's latency)
            for t in range(T - 1, -1, -1):
                nt = one - dl[t]
                x = vl[t] if has_v else one - one
                last = (((g * nv) * nt + rl[t]) - x) + (gl * nt) * last
                ol[t] = last
                nv = x


@_kernel("r2 r2 f2 r2 f2 w2 r1 i s s b b b", parallel=True)
def gae_blocks(r, v, d, nvals, term, out, boot, lb, g, gl, has_v, has_nv, has_term):
    """:func:`gae_rows` on time-major ``(T, L)`` views: blocks of ``lb`` lanes stepped together
    backwards through time, each step one contiguous run of every array."""
    T, L = out.shape
    one = np.ones(1, out.dtype)[0]
    for k in prange((L + lb - 1) // lb):
        l0 = k * lb
        n = min(L, l0 + lb) - l0
        nv = boot[l0:l0 + n].copy()
        last = np.zeros(n, out.dtype)
        for t in range(T - 1, -1, -1):
            rt, vt, dt_, nt_, tt, ot = (r[t, l0:l0 + n], v[t, l0:l0 + n], d[t, l0:l0 + n], nvals[t, l0:l0 + n],
                                        term[t, l0:l0 + n], out[t, l0:l0 + n])
            if has_nv or has_term:
                for j in range(n):
                    a, x = _gae_step(rt[j], vt[j], dt_[j], nt_[j], tt[j], nv[j], last[j], g, gl, has_v, has_nv,
                                     has_term, one)
                    last[j], ot[j], nv[j] = a, a, x
            else:  # (_gae_step without truncations, written out: the loop over lanes vectorises)
                for j in range(n):
                    nt = one - dt_[j]
                    x = vt[j] if has_v else one - one
                    a = (((g * nv[j]) * nt + rt[j]) - x) + (gl * nt) * last[j]
                    last[j], ot[j], nv[j] = a, a, x
