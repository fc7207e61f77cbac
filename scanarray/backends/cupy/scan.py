"""CuPy diagonal scans: methods ``lookback`` and ``sequential`` (kernels in ``cuda/scan.cu``).

``lookback`` is a single-pass chunked scan with decoupled look-back [1]_: each
tile of the time axis reads ``a`` and ``b`` once, publishes its pair (product of
``a``, local ``h``), looks back over its predecessors' pairs and writes ``h``
once, so the traffic is that of a copy whatever the row split. The driver picks
a kernel by layout and length, never copying data to change it:

- time contiguous (stride +1 or, for ``reverse``, -1), or any layout where time
  is not the closest axis: ``rows_tiles`` (tiles along each row; rows of one
  tile need no look-back; on compute capability 9.0 and up, rows of several
  tiles run ``rows_staged``, its tiles staged in shared memory), ``rows_block``
  (a block per row, for enough long rows to fill the device) or, for rows
  shorter than a tile, ``rows_seg`` (several rows a warp, up to 16 lanes'
  steps a row) and ``rows_warp`` (a warp per row);
- lanes closer in memory than time steps (time-major, e.g. axis 0 of a C-order
  ``(T, N)`` array): ``lanes_tiles``, threads along lanes (coalesced), tiles
  along time chained per lane by the same look-back.

``sequential`` runs one thread per lane over all of time.

Broadcast ``a`` is read through its strides (0 where broadcast); a time
stride of 0 (scalar or per-lane ``a``) loads one value per lane. Inputs are
cast as they are read. Non-finite values land where the sequential loop puts
them (see the header of ``scan.cu``), without a host round trip. Everything
runs on the inputs' device and CuPy's current stream; nothing synchronises.

References
----------
.. [1] D. Merrill and M. Garland, "Single-pass Parallel Prefix Scan with
   Decoupled Look-back", NVIDIA Technical Report NVR-2016-002, 2016.
"""

from __future__ import annotations

import math
import threading

import numpy as np

from ... import _dtypes
from .._layout import element_strides as _estrides, merge_axes as _merge
from . import _common
from .tuning import TUNING

__all__ = ["adjoint", "instantiations", "linear_recurrence", "plan"]

#: storage dtypes the kernels read and write directly (the dtype table's); others are cast first
_STORAGE = frozenset(_dtypes.DTYPES)
_STORAGE_DT = frozenset(np.dtype(n) for n in _STORAGE if hasattr(np, n))  # (a quicker test than by name)
_MAX_LANE_DIMS = 4


def linear_recurrence(p, *, tuning=TUNING, packed=True):
    """Compute the diagonal scan of a :class:`scanarray._problem.Problem` into ``p.out``.

    ``tuning``: the tile shapes (:data:`.tuning.TUNING`'s layout); ``packed``: launch through
    :class:`._common.PackedLauncher` (else CuPy's kernel call, which bound calls do not repeat).
    """
    import cupy

    a, b, out = p.a, p.b, p.out
    mul, mul_out = (p.mul, p.mul_out) if p.mul is not None and p.mul_out is not None else (None, None)
    if p.reverse:  # views with negative time strides: no flipped copies
        a, b, out = a[..., ::-1], b[..., ::-1], out[..., ::-1]
        if mul is not None:
            mul, mul_out = mul[..., ::-1], mul_out[..., ::-1]
    dt = np.dtype(p.dtype)
    dev = out.data.device_id
    # Entering a Device context costs host time on every call: only when it would change anything.
    same_dev = dev == cupy.cuda.runtime.getDevice()
    with _nullctx() if same_dev else cupy.cuda.Device(dev):
        a_in, b_in = a, b
        a = _readable(cupy, a, dt)
        b = _readable(cupy, b, dt)
        # No cast copy: the launch reads the caller's own memory, through views at most (the
        # reversed time axis, the lane views below), whose offsets the bound call keeps.
        own = a is a_in and b is b_in
        h0 = p.initial
        lanes = tuple(b.shape[:-1])
        # Drop length-1 lane axes, then order the others by b's strides, widest first, so the
        # closest lanes come last (the kernels' lane index runs fastest along the last axis).
        kept = [i for i, n in enumerate(lanes) if n > 1]
        rank = {i: r for r, i in enumerate(kept)}
        by_stride = sorted(kept, key=lambda i: (abs(b.strides[i]), abs(out.strides[i])), reverse=True)
        order = tuple(rank[i] for i in by_stride)
        sel = tuple(0 if n == 1 else slice(None) for n in lanes)

        trivial = len(kept) == len(lanes) and order == tuple(range(len(kept)))

        def lanes_view(x):
            if trivial:  # the common case: skip the view calls (host time matters for small scans)
                return x
            v = x[sel + (slice(None),)]
            return v.transpose(order + (v.ndim - 1,))

        a, b, out = lanes_view(a), lanes_view(b), lanes_view(out)
        if h0 is not None:
            h0 = h0 if trivial else h0[sel].transpose(order)
            h0 = cupy.ascontiguousarray(h0.astype(dt, copy=False))
        epi = None
        if mul is not None:
            epi = _epilogue(a, b, out, lanes_view(mul), lanes_view(mul_out))
        elif p.scale is not None and out.dtype == dt and dt.kind == "f":  # (Scaled: real, stored as computed)
            epi = float(p.scale)
        plan_ = _scan(cupy, a, b, out, h0, dt, p.method, tuning, packed, epi)
        if mul is not None and epi is None:  # a layout the kernels do not fuse: one more pass
            cupy.multiply(p.out, p.mul, out=p.mul_out)
        if p.scale is not None and epi is None:
            p.out *= p.scale
        if plan_ is not None and same_dev and own and mul is None and (p.scale is None or epi is not None):
            # one launch on the caller's own memory (a row of shape (1, T) included: its length-1
            # lane axis is viewed away): a repeated call can go straight to it, its factor with it
            ptrs = tuple(None if x is None else x.data.ptr for x in (a, b, out, h0))
            p.bind = _common.Binder(plan_, dev, *ptrs, epi=() if epi is None else (np.float64(epi),))
    return p.out


def adjoint(a, g, lam, h, ga, reverse, method="auto"):
    """The adjoint's scan (:mod:`scanarray._vjp`) in one launch over the whole arrays; False where
    the kernels do not take the layout (the caller then scans views of one step less), else the
    launch itself, ``launch(pa, pg, plam, ph, pga)``, which repeats it on the raw pointers of new
    arrays of this signature (the same pointers modulo 16, ``lam`` and ``ga`` overlapping nothing)
    on CuPy's current stream.

    Canonical arrays ``(*lanes, T)`` of one storage dtype, ``T >= 2``: the forward call's ``a`` and
    result ``h``, the incoming gradient ``g``. Writes ``lam`` (``grad_b``) at every step and ``ga =
    lam * h_prev`` at every step, zero at the forward's first (whose ``h_prev`` is the initial state:
    a caller with one writes that step). The scan runs against the forward's direction (``reverse``: the forward's); the
    coefficient of each step is the forward's next ``a`` and its product the forward's previous
    ``h``. Those shifts happen inside the kernels (``SH`` in cuda/scan.cu, ``MulOutS`` in
    cuda/scan.cuh), so every array is read where it lies, with the vector accesses of its own
    alignment, and the scan covers all T steps: the layouts of the forward's own kernels. Calls
    of one signature (shapes, strides, dtypes, pointer alignment) reuse their plan.
    """
    import cupy

    dev = lam.data.device_id
    arrays = (a, g, lam, h, ga)
    key = (lam.shape, reverse, method, dev,
           *(x.strides for x in arrays), *(x.dtype for x in arrays), *(x.data.ptr % 16 for x in arrays))
    entry = _adjoints.get(key)
    if entry is None:
        if len(_adjoints) > 4096:
            _adjoints.clear()
        entry = _adjoints[key] = _adjoint_entry(a, g, lam, h, ga, reverse, method)
    if not entry or dev != cupy.cuda.runtime.getDevice():
        return False
    launch, exts = entry
    ptrs = [x.data.ptr for x in arrays]
    lo = [p + e[0] for p, e in zip(ptrs, exts)]
    hi = [p + e[1] for p, e in zip(ptrs, exts)]
    # the written arrays (lam, ga) overlap nothing else (a caller's out= could)
    for w in (2, 4):
        for r in range(5):
            if r != w and lo[w] < hi[r] and lo[r] < hi[w]:
                return False
    launch(*ptrs)
    return launch


def _shifted_launch(plan_, offs, vec_m, dev):
    """:func:`adjoint`'s launch on the raw pointers of its five arrays."""
    import cupy

    set_device = cupy.cuda.runtime.setDevice

    go = None

    def launch(*ptrs, stream_ptr=None):
        nonlocal go
        pa, pb, po, pm, pmo = (p + o for p, o in zip(ptrs, offs))
        # the launch goes to the driver directly: make the device's context current in this thread
        # (torch runs backward passes on threads of its own, where no CuPy call has done so yet)
        set_device(dev)
        if stream_ptr is None:  # CuPy's current stream
            plan_.launch_ptrs(cupy, pa, pb, po, None, dev, epi=(pm, pmo, vec_m, _ONE))
            return True
        if go is None:  # (the kernel is compiled: the first launch went through launch_ptrs)
            go = plan_.direct(dev, (0, 0, vec_m, _ONE), epi_ptrs=2)
            if go is None:
                return False
        go(stream_ptr, pa, pb, po, None, pm, pmo)
        return True

    launch.plan = plan_  # (what tests read: the kernel that runs it)
    return launch


_adjoints: dict = {}
#: the kernels of the shifted scan (scan.cu's rows kernels; the time-major ones keep the views)
_SHIFT_KINDS = frozenset(("rows_tiles", "rows_block", "rows_wide", "rows_warp", "rows_seg"))


def _adjoint_entry(a, g, lam, h, ga, reverse, method):
    """(launch, byte extents of the arrays) of :func:`adjoint`, or False."""
    from . import auto_method

    dt = lam.dtype
    arrays = (a, g, lam, h, ga)
    if dt not in _STORAGE_DT or any(x.dtype != dt for x in arrays) or method not in ("auto", "lookback"):
        return False
    T = lam.shape[-1]
    so = _estrides(lam)
    if T < 2 or any(s % dt.itemsize for x in arrays for s in x.strides) or a.strides[-1] == 0:
        return False  # (a constant in time: the views' kernels read it once a row)
    if any(x.shape != lam.shape or 0 in x.strides[:-1] for x in (a, g, h, ga)):
        return False  # a or g broadcast along lanes (per-example gradients under vmap): the views' path
    if _estrides(h) != so or _estrides(ga) != so or (ga.data.ptr - lam.data.ptr) % 16:
        return False  # MulOutS: mul and mul_out at out's element offsets, mul_out aligned as out
    views = arrays if reverse else tuple(x[..., ::-1] for x in arrays)
    if method == "auto" and auto_method(_Shape(views[1])) != "lookback":
        return False
    lanes = views[1].shape[:-1]
    kept = [i for i, n in enumerate(lanes) if n > 1]
    rank = {i: r for r, i in enumerate(kept)}
    order = tuple(rank[i] for i in sorted(kept, key=lambda i: (abs(views[1].strides[i]), abs(views[2].strides[i])),
                                          reverse=True))
    if len(kept) != len(lanes) or order != tuple(range(len(kept))):
        # length-1 lanes viewed away, the others ordered by b's strides (as linear_recurrence does)
        sel = tuple(0 if n == 1 else slice(None) for n in lanes) + (slice(None),)
        views = tuple(v[sel].transpose(order + (len(kept),)) for v in views)
    va, vb, vo, vm, vmo = views
    ns, ss = _merge(list(vb.shape[:-1]), [_estrides(x)[:-1] for x in (va, vb, vo)])
    if len(ns) > _MAX_LANE_DIMS:
        return False
    p = plan(va, vb, vo, np.dtype(dt), "lookback", ns, ss, fused="shift")
    if p.kind not in _SHIFT_KINDS:
        return False
    offs = tuple(v.data.ptr - x.data.ptr for v, x in zip(views, arrays))
    exts = tuple(_common.extent(x) for x in arrays)
    return _shifted_launch(p, offs, np.int32((vm.data.ptr - vo.data.ptr) % 16 == 0), lam.data.device_id), exts


class _Shape:
    """What ``auto_method`` reads of a diagonal Problem."""

    dense = False

    def __init__(self, b):
        self.b = b


def _readable(cupy, x, dt):
    """``x`` itself if the kernels read its dtype and strides, else a cast (of the compact view)."""
    xdt = x.dtype
    if xdt in _STORAGE_DT or xdt.name in _STORAGE:
        size = x.itemsize
        if all(s % size == 0 for s in x.strides):
            return x
    compact = x[tuple(slice(0, 1) if (s == 0 and n > 1) else slice(None) for s, n in zip(x.strides, x.shape))]
    return cupy.broadcast_to(cupy.ascontiguousarray(compact.astype(dt)), x.shape)


def _scan(cupy, a, b, out, h0, dt, method, tuning, packed, epi=None):
    ns = list(b.shape[:-1])
    ss = [_estrides(x)[:-1] for x in (a, b, out)]
    ns, ss = _merge(ns, ss)
    if len(ns) > _MAX_LANE_DIMS:  # rare: more unmergeable lane axes than the kernels take
        for i in range(b.shape[0]):
            _scan(cupy, a[i], b[i], out[i], None if h0 is None else h0[i], dt, method, tuning, packed,
                  epi if epi is None or isinstance(epi, float) else (epi[0][i], epi[1][i]))
        return None
    if h0 is not None:
        h0 = h0.reshape(-1)
    fused = False if epi is None else "scale" if isinstance(epi, float) else True
    plan_ = plan(a, b, out, dt, method, ns, ss, tuning=tuning, packed=packed, fused=fused)
    if epi is None:
        plan_.launch(cupy, a, b, out, h0)
    elif fused == "scale":
        plan_.launch(cupy, a, b, out, h0, (np.float64(epi),))
    else:
        pm, pmo = epi[0].data.ptr, epi[1].data.ptr
        plan_.launch(cupy, a, b, out, h0, (pm, pmo, np.int32((pm - out.data.ptr) % 16 == 0)))
    return plan_


def _epilogue(a, b, out, mul, mul_out):
    """``(mul, mul_out)`` where the kernels can write ``mul_out = h * mul`` as they write ``h``
    (``Problem.mul``; MulOut in scan.cuh), else None: one dtype for a, b, out and both, the
    element strides of out, ``mul_out`` aligned as out modulo 16, and neither overlapping out (nor
    each other, unless the same view)."""
    dt = out.dtype
    if not (a.dtype == b.dtype == dt == mul.dtype == mul_out.dtype) or dt.name not in _STORAGE:
        return None
    so = _estrides(out)
    if _estrides(mul) != so or _estrides(mul_out) != so or (mul_out.data.ptr - out.data.ptr) % 16:
        return None
    if any(x.strides[i] % x.itemsize for x in (mul, mul_out) for i in range(x.ndim)):
        return None
    same = mul.data.ptr == mul_out.data.ptr
    pairs = [(out, mul), (out, mul_out)] + ([] if same else [(mul, mul_out)])
    if any(_overlap(x, y) for x, y in pairs):
        return None
    return mul, mul_out


def _overlap(x, y):
    """Whether the byte ranges of ``x`` and ``y`` intersect."""
    (lx, hx), (ly, hy) = _common.extent(x), _common.extent(y)
    return x.data.ptr + lx < y.data.ptr + hy and y.data.ptr + ly < x.data.ptr + hx


_ONE, _ZERO = np.int32(1), np.int32(0)
_ZERO32 = np.uint32(0)


class _Plan:
    """One kernel launch: which kernel, its grid, its arguments besides the arrays."""

    def __init__(self, **kw):
        self.kt = 1  # tiles along time chained by look-back (kernels without look-back: 1)
        self.packed = True
        self.__dict__.update(kw)
        self.fns = {}  # (compiled kernel, packed launcher or None) per device

    def launch(self, cupy, a, b, out, h0, epi=()):
        self.launch_ptrs(cupy, a.data.ptr, b.data.ptr, out.data.ptr, None if h0 is None else h0.data.ptr, epi=epi)

    def launch_ptrs(self, cupy, pa, pb, po, ph0, dev=None, epi=()):
        """Launch on device pointers (ints) of the planned views (``ph0`` None for zeros) on the
        current device (``dev``, when the caller knows it); ``epi``: the fused product's arguments."""
        if self.kt <= 1:
            args = self._args(pa, pb, po, ph0, None)
            if epi:
                args += epi
            self._call(cupy, args, dev)
            return
        ws = _workspace(cupy, self.rec_size, self.slots)
        with ws.launching():
            args = self._args(pa, pb, po, ph0, ws)
            if epi:
                args += epi
            self._call(cupy, args, dev)

    def _args(self, pa, pb, po, ph0, ws):
        """The kernel's argument list (``ws``: the workspace of a look-back launch, else None)."""
        sc = self.__dict__.get("_scalars")
        if sc is None:  # the scalar arguments, converted once per plan
            ns, (sa, sb, so) = self.ns, self.ss
            pad = 4 - len(ns)
            lane_args = [np.int32(len(ns))]
            for vals in (ns, sa, sb, so):
                lane_args += [np.int64(v) for v in list(vals) + [1 if vals is ns else 0] * pad]
            times = [np.int64(v) for v in self.times]
            vec = [np.int32(v) for v in getattr(self, "vec", ())]
            sc = self._scalars = (times, vec, lane_args)
        times, vec, lane_args = sc
        head = [pa, pb, po, pb if ph0 is None else ph0, _ONE if ph0 is not None else _ZERO] + times
        if self.kind in ("seq", "rows_warp", "rows_seg"):
            return head + vec + lane_args + [np.int64(self.nlanes)]
        if self.kind == "rows_block":
            return head + vec + lane_args
        if self.kind == "rows_wide":
            return head + lane_args
        # look-back kernels; a one-tile launch never touches its workspace argument (b stands in)
        tail = [pb, _ZERO32, np.int64(self.kt)] if ws is None else [ws.ptr, np.uint32(ws.epoch), np.int64(self.kt)]
        if self.kind == "rows_tiles":
            return head + vec + lane_args + tail
        return head + lane_args + [np.int64(self.nlanes), np.int64(self.ng)] + tail

    def direct(self, dev, epi=(), epi_ptrs=0):
        """For bound calls: ``go(stream_ptr, pa, pb, po, ph0, *ptrs)`` launching this plan's kernel
        with the arguments packed from a template (a look-back launch also takes its stream's
        workspace; ``epi``: the epilogue's arguments, after the rest, of which the first
        ``epi_ptrs`` are pointers given as ``ptrs`` on each call), or None where that does not
        apply (a kernel launched through CuPy's call)."""
        entry = self.fns.get(dev)
        if entry is None or entry[1] is None:
            return None
        base = self._args(0, 0, 0, None, None)
        template = base + list(epi)
        if self.kt > 1:
            rec_size, slots = self.rec_size, self.slots
            return entry[1].bind(self.grid, self.threads, template, tail=len(epi), tail_ptrs=epi_ptrs,
                                 workspace=lambda stream_ptr: _workspace_at(dev, stream_ptr, rec_size, slots))
        ws_at = len(base) - 3 if self.kind in ("rows_tiles", "lanes_tiles") else None
        return entry[1].bind(self.grid, self.threads, template, ws_at, tail=len(epi), tail_ptrs=epi_ptrs)

    def _call(self, cupy, args, dev=None):
        # the compiled kernel and its packed launcher (None: CuPy's call) per device, per plan: one
        # launcher per kernel shared by all its plans (_common.launcher) failed a fused-product
        # test on the H200 (tests/test_cupy.py, test_fused_product), the cause not isolated
        if dev is None:
            dev = cupy.cuda.runtime.getDevice()
        entry = self.fns.get(dev)
        if entry is None:
            fn = _common.get_function("scan.cu", self.name, group=self.group)
            entry = self.fns[dev] = (fn, _common.PackedLauncher.create(fn, args) if self.packed else None)
        fn, packed = entry
        if packed is not None:
            packed.launch(cupy, self.grid, self.threads, args)
        else:
            fn((self.grid,), (self.threads,), _common.raw_args(args))


class _nullctx:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def _vec_ok(x, st, lane_strides, G):
    """Whether groups of ``G`` steps of ``x`` can be read as one aligned vector."""
    nbytes = G * x.itemsize
    if abs(st) != 1 or nbytes > 16 or nbytes & (nbytes - 1):
        return False
    if any(s % G for s in lane_strides):
        return False
    low = x.data.ptr if st == 1 else x.data.ptr - (G - 1) * x.itemsize
    return low % nbytes == 0


def _fit_group(a, b, out, ss, times, ac, T, rows_shape, G):
    """Steps a vector access of the rows kernels moves (``G``): the most, up to 16 bytes, for which
    every array contiguous along time is aligned (pointer and lane strides) and, for rows shorter
    than a tile of the widest groups, the rows hold whole groups. Rows that allow no wider group
    read one step a load: still coalesced across the warp and issued up front, where 16-byte
    groups would send every load down the per-group path. Rows strided in time keep the widest
    (their loads are per element anyway)."""
    NT, items, _ = rows_shape
    (ta, tb, to), (sa, sb, so) = times, ss
    arrays = [(x, t, s) for x, t, s in [(b, tb, sb), (out, to, so)] + ([] if ac else [(a, ta, sa)]) if abs(t) == 1]
    if not arrays:
        return G
    while G > 1 and (T < NT * items and T % G or not all(_vec_ok(x, t, s, G) for x, t, s in arrays)):
        G //= 2
    return G


def _lanes_vec(a, b, out, ns, ss, times, ac):
    """(lanes a thread Q, how a is read) where time-major lanes can move as Q-lane vectors
    (``lanes_vec``), else None: b and out contiguous along the innermost lane axis, a contiguous
    or broadcast along it, the lane count, time strides, outer lane strides and pointers of the
    arrays read or written as vectors all multiples of Q elements."""
    (sa, sb, so), (ta, tb, to) = (s[-1] for s in ss), times
    if sb != 1 or so != 1 or sa not in (0, 1):
        return None
    a_vec = sa == 1 and not ac  # a per element: read as vectors too
    q = min(4, 16 // max(b.itemsize, out.itemsize, a.itemsize if a_vec else 0))
    if q < 2 or ns[-1] % q:
        return None
    for x, t, strides in ((b, tb, ss[1]), (out, to, ss[2])) + (((a, ta, ss[0]),) if a_vec else ()):
        if t % q or any(s % q for s in strides[:-1]) or x.data.ptr % (q * x.itemsize):
            return None
    return q, (2 if sa else 3) if ac else (0 if sa else 1)


def plan(a, b, out, dt, method, ns=None, ss=None, *, tuning=TUNING, packed=True, fused=False):
    """Choose kernel, template arguments and grid for canonical views ``a, b, out (*lanes, T)``
    (``fused``: the kernels with an epilogue, :func:`_epi_args`).

    Plans are cached by everything they depend on (shapes, strides, dtypes, pointer alignment,
    method, the ``tuning`` table, device), so a repeated call costs a dictionary lookup.
    """
    if ns is None:
        ns, ss = _merge(list(b.shape[:-1]), [_estrides(x)[:-1] for x in (a, b, out)])
    key = (tuple(b.shape), a.strides, b.strides, out.strides, a.dtype, b.dtype, out.dtype, dt, method,
           tuple(ns), tuple(map(tuple, ss)), a.data.ptr % 16, b.data.ptr % 16, out.data.ptr % 16, id(tuning),
           packed, b.device.id, fused)
    p = _plans.get(key)
    if p is None or p.tuning is not tuning:  # (a table of another call that had the same id)
        if len(_plans) > 4096:
            _plans.clear()
        p = _plans[key] = _make_plan(a, b, out, dt, method, ns, ss, tuning, fused)
        p.tuning, p.packed = tuning, packed
    return p


_plans: dict = {}


class _Kernels:
    """Names of the kernel instantiations (scan.cu) for one dtype combination: ``types`` the C++
    names of a, b, out and the compute type (of itemsize ``csize``), ``a`` constant in time or not
    (``ac``), vector accesses of ``G`` steps where the widest storage takes ``Gmax``. Tile shapes
    from ``cfg`` (:data:`.tuning.TUNING`)."""

    def __init__(self, types, csize, ac, G, Gmax, cfg, epi=""):
        self.types, self.cs, self.ac, self.G, self.Gmax, self.cfg = types, csize, _b(ac), G, Gmax, cfg
        self.epi = epi  # the epilogue's template arguments (_epi_args), or none
        # rows_warp: its own register budget (tuning.py); a lane holds only as many vectors as a row
        # needs when the row fits one pass of the warp (NV from 1 to the shape's)
        self.warp_shape = cfg.get("rows_warp", {}).get(csize) or cfg["rows"][csize]
        self.nv_max = max(1, self.warp_shape[1] // Gmax)

    def rows(self, which):
        """``(threads, tile length, template arguments)`` of the rows kernels of shape ``which``. NV
        (vectors a thread) is that of the widest groups whatever G, so narrower groups hold no more
        registers (float32 rows_tiles and rows_warp with G = 1 and 16 steps a thread spilled)."""
        NT, items, minb = self.cfg[which][self.cs]
        NV = max(1, items // self.Gmax)
        return NT, NT * self.G * NV, f"{self.types}, {NT}, {self.G}, {NV}, {self.ac}, {minb}"

    def rows_kernel(self, kernel, which, *extra):
        if self.epi and kernel == "rows_tiles" and not extra:
            extra = ("true",)  # LB, defaulted before the fused product's arguments
        return f"scanarray::{kernel}<{', '.join((self.rows(which)[2],) + extra)}{self.epi}>"

    def seg(self, S):
        NT, items, minb = self.cfg["rows"][self.cs]
        nv = max(1, items // self.Gmax)
        return f"scanarray::rows_seg<{self.types}, {NT}, {self.G}, {nv}, {S}, {self.ac}, {minb}{self.epi}>"

    def warp(self, nv):
        NT, _, minb = self.warp_shape
        return f"scanarray::rows_warp<{self.types}, {NT}, {self.G}, {nv}, {self.ac}, {minb}{self.epi}>"

    def lanes(self, staged, lw):
        nw, S, minb, *_ = self.cfg["lanes_staged" if staged else "lanes"][self.cs]
        return f"scanarray::lanes_tiles<{self.types}, {nw}, {S}, {self.ac}, {minb}, {_b(staged)}, {lw}{self.epi}>"

    def lanes_vec(self, q, ak, lw):
        nw, S, minb, *_ = self.cfg["lanes_vec"][self.cs]
        return f"scanarray::lanes_vec<{self.types}, {nw}, {S}, {q}, {ak}, {minb}, {lw}{self.epi}>"

    def wide(self, direction):
        NT, minb = self.cfg["rows_wide"][self.cs]
        return f"scanarray::rows_wide<{self.types}, {NT}, {self.G}, {self.ac}, {minb}, {direction}{self.epi}>"

    def seq(self):
        return f"scanarray::seq<{self.types}, {self.ac}{self.epi}>"


def instantiations(a_dt, b_dt, out_dt, dt, tuning=TUNING, narrower=True, fused=False):
    """Every kernel (scan.cu) the planner can name for these dtypes of a, b, out and compute: each
    kernel at every tile shape of ``tuning``, vector accesses of the widest group (and, with
    ``narrower``, of one narrower), the short-row kernels' smallest and largest widths; ``fused``:
    those with an epilogue (:func:`_epi_args`; for tools/compile_cuda.py), and with ``fused="shift"``
    the rows kernels of the adjoint's shifted scan (:func:`adjoint`), at the widest groups."""
    if fused == "shift":
        return _shift_instantiations(a_dt, b_dt, out_dt, dt, tuning)
    types = ", ".join(_dtypes.ctype(x) for x in (a_dt, b_dt, out_dt, dt))
    epi = _epi_args(out_dt, fused) if fused else ""
    size = {x: _dtypes.lookup(x).itemsize for x in (a_dt, b_dt, out_dt, dt)}
    cs = size[dt]
    names = []
    for ac in (False, True):
        widest = max(size[b_dt], size[out_dt], 0 if ac else size[a_dt])
        Gmax = max(1, 16 // widest)
        stages = _stages(size[a_dt], size[b_dt], ac, cs)
        for G in dict.fromkeys((Gmax, max(1, Gmax // 2) if narrower else Gmax)):
            k = _Kernels(types, cs, ac, G, Gmax, tuning, epi)
            names += [k.rows_kernel("rows_tiles", "rows", "false"), k.rows_kernel("rows_tiles", "rows_long"),
                      k.rows_kernel("rows_block", "rows_block"), k.seg(1), k.seg(16), k.warp(1), k.warp(k.nv_max)]
            if tuning["rows_staged"].get(cs) and stages:
                names.append(k.rows_kernel("rows_staged", "rows_staged"))
            if G == Gmax and widest == cs and tuning["rows_wide"].get(cs):
                names += [k.wide(1), k.wide(-1)]
        narrow = tuning["lanes_narrow"].get(cs)
        for staged in (False, True) if tuning["lanes_staged"].get(cs) and stages else (False,):
            names += [k.lanes(staged, lw) for lw in dict.fromkeys((32, narrow[0] if narrow else 32))]
        if tuning["lanes_vec"].get(cs):
            for ak in (2, 3) if ac else (0, 1):
                q = min(4, 16 // max(size[b_dt], size[out_dt], size[a_dt] if ak in (0, 2) else 0))
                if q >= 2:
                    names += [k.lanes_vec(q, ak, lw) for lw in dict.fromkeys((32, narrow[0] if narrow else 32))
                              if lw % q == 0]
        names.append(k.seq())
    return list(dict.fromkeys(names))


def _stages(a_size, b_size, ac, csize):
    """Whether a tile of a and b can be staged in shared memory (rows_staged, lanes_tiles with STG):
    the staged tiles are sized for the compute type (tuning.py), so storage read wider than it
    (``dtype=`` narrower than the inputs) would overflow the 48 KiB of static shared memory; such
    tiles stay in registers."""
    return max(b_size, 0 if ac else a_size) <= csize


def _shift_instantiations(a_dt, b_dt, out_dt, dt, tuning):
    """The rows kernels of the adjoint's shifted scan (a per step: the shift reads a step by step)."""
    types = ", ".join(_dtypes.ctype(x) for x in (a_dt, b_dt, out_dt, dt))
    size = {x: _dtypes.lookup(x).itemsize for x in (a_dt, b_dt, out_dt, dt)}
    cs = size[dt]
    widest = max(size[a_dt], size[b_dt], size[out_dt])
    Gmax = max(1, 16 // widest)
    k = _Kernels(types, cs, False, Gmax, Gmax, tuning, _epi_args(out_dt, "shift"))
    names = [k.rows_kernel("rows_tiles", "rows", "false"), k.rows_kernel("rows_tiles", "rows_long"),
             k.rows_kernel("rows_block", "rows_block"), k.seg(1), k.seg(16), k.warp(1), k.warp(k.nv_max)]
    if tuning["rows_staged"].get(cs) and _stages(size[a_dt], size[b_dt], False, cs):
        names.append(k.rows_kernel("rows_staged", "rows_staged"))
    if widest == cs and tuning["rows_wide"].get(cs):
        names += [k.wide(1), k.wide(-1)]
    return list(dict.fromkeys(names))


def _epi_args(out_dt, fused):
    """The fused kernels' trailing template arguments (``EPI`` in scan.cu): ``True``, the adjoint's
    product (mul, mul_out, vec_m: MulOut in scan.cuh); ``"shift"``, the same and a fourth for its
    shifted scan (MulOutS); ``"scale"``, the stored values' factor (Scaled)."""
    if fused == "scale":
        return ", double"
    co = _dtypes.ctype(out_dt)
    return f", const {co}*, {co}*, int" + (", int" if fused == "shift" else "")


def _make_plan(a, b, out, dt, method, ns, ss, cfg, fused=False):
    T = b.shape[-1]
    nlanes = math.prod(ns)
    ta, tb, to = (_estrides(x)[-1] for x in (a, b, out))
    ac = ta == 0  # a constant along time (scalar or per-lane): one load per lane
    types = ", ".join([_dtypes.ctype(x.dtype) for x in (a, b, out)] + [_dtypes.ctype(dt)])
    csize = dt.itemsize
    # rows kernels: G steps per vector access (see _Kernels.rows)
    widest = max(b.itemsize, out.itemsize, 0 if ac else a.itemsize)
    Gmax = max(1, 16 // widest)
    G = _fit_group(a, b, out, ss, (ta, tb, to), ac, T, cfg["rows"][csize], Gmax)
    k = _Kernels(types, csize, ac, G, Gmax, cfg, _epi_args(out.dtype, fused) if fused else "")
    NT, tile, _ = k.rows("rows")
    # rows shorter than a tile of the widest groups run the short-row kernels whatever G (a block a
    # row on narrow groups ran at half a warp's rate)
    short = T < cfg["rows"][csize][0] * cfg["rows"][csize][1]
    # Rows of at most 16 lanes' steps run rows_seg: 32 / S rows a warp, each row's scan on its S
    # lanes (S a power of two). A warp per row (rows_warp) spans 32 lanes' steps whatever the row.
    items_r = G * max(1, cfg["rows"][csize][1] // Gmax)
    S_seg = 1 << (max(1, -(-T // items_r)) - 1).bit_length()
    NT_w = k.warp_shape[0]
    NT_b = k.rows("rows_block")[0]
    stages = _stages(a.itemsize, b.itemsize, ac, csize)
    staged = stages and cfg.get("rows_staged", {}).get(csize) is not None and _staging_device(cupy_mod())
    # long rows: the tile staged in shared memory (rows_staged), else in registers
    long_shape = "rows_staged" if staged else "rows_long"
    NT_l, tile_l, _ = k.rows(long_shape)
    lanes_stg = stages and cfg.get("lanes_staged", {}).get(csize) is not None and _staging_device(cupy_mod())
    # time-major: (warps, steps, min blocks per SM[, lanes per tile]), staged in shared memory or not
    nw_l, S, minb_l, *lw = cfg["lanes_staged" if lanes_stg else "lanes"][csize]
    narrow = cfg.get("lanes_narrow", {}).get(csize)
    lw = lw[0] if lw else (narrow[0] if narrow and nlanes < narrow[1] else 32)
    # time-major (lanes closer in memory than steps; with lanes contiguous and aligned: lanes_vec)
    lanes_closer = bool(ns) and abs(ss[1][-1]) < abs(tb) and abs(tb) != 1
    vshape = cfg.get("lanes_vec", {}).get(csize)
    lvec = _lanes_vec(a, b, out, ns, ss, (ta, tb, to), ac) if vshape is not None and lanes_closer else None
    if lvec is not None:
        nw_v, S_v, minb_v, *lw_v = vshape
        lw_v = lw_v[0] if lw_v else lw
        lvec = (nw_v, S_v, lw_v, *lvec)
    names = {
        "seq": k.seq(),
        "rows_warp": k.warp(min(k.nv_max, max(1, -(-T // (32 * G))))),
        **({"rows_seg": k.seg(S_seg)} if S_seg < 32 else {}),
        "rows_tiles": k.rows_kernel("rows_tiles", "rows", "false"),  # rows of one tile: no look-back code
        "rows_block": k.rows_kernel("rows_block", "rows_block"),
        "rows_long": k.rows_kernel("rows_staged" if staged else "rows_tiles", long_shape),
        "lanes_tiles": k.lanes(lanes_stg, lw),
        **({"lanes_vec": k.lanes_vec(lvec[3], lvec[4], lw_v)} if lvec is not None else {}),
    }
    # every rows_seg width and rows_warp depth in the same module: one compilation serves short rows
    # of any length
    group = tuple(dict.fromkeys([*names.values(), *(k.seg(1 << i) for i in range(5)),
                                 *(k.warp(nv) for nv in range(1, k.nv_max + 1))])) if not fused else ()
    common = dict(ns=ns, ss=ss, nlanes=nlanes, group=group, times=(T, ta, tb, to))

    if method == "sequential":
        threads = cfg["seq_threads"]
        grid = max(1, min(-(-nlanes // threads), 2**31 - 1))
        return _Plan(kind="seq", name=names["seq"], grid=grid, threads=threads, **common)

    if lvec is not None:  # same arguments as lanes_tiles
        nw_v, S_v, lw_v, q, _ = lvec
        kt = -(-T // (32 * nw_v * q // lw_v * S_v))
        ng = -(-nlanes // lw_v)
        return _Plan(kind="lanes_tiles", name=names["lanes_vec"], grid=kt * ng, threads=32 * nw_v, ng=ng, kt=kt,
                     rec_size=_rec_size(dt), slots=kt * ng * lw_v, **common)
    if lanes_closer:
        kt = -(-T // (32 * nw_l // lw * S))
        ng = -(-nlanes // lw)
        return _Plan(kind="lanes_tiles", name=names["lanes_tiles"], grid=kt * ng, threads=32 * nw_l, ng=ng, kt=kt,
                     rec_size=_rec_size(dt), slots=kt * ng * lw, **common)

    vec = (
        0 if ac else int(_vec_ok(a, ta, ss[0], G)),
        int(_vec_ok(b, tb, ss[1], G)),
        int(_vec_ok(out, to, ss[2], G)),
    )
    if short:  # several rows a warp (rows_seg) or a warp each (rows_warp), no look-back
        nw = NT // 32
        if S_seg < 32:
            return _Plan(kind="rows_seg", name=names["rows_seg"], grid=-(-nlanes // (nw * (32 // S_seg))),
                         threads=NT, vec=vec, **common)
        return _Plan(kind="rows_warp", name=names["rows_warp"], grid=-(-nlanes // (NT_w // 32)), threads=NT_w,
                     vec=vec, **common)
    if T == tile:  # one tile per row, no look-back
        return _Plan(kind="rows_tiles", name=names["rows_tiles"], grid=nlanes, threads=NT, vec=vec, kt=1,
                     rec_size=_rec_size(dt), slots=nlanes, **common)
    minb = cfg["rows_block"][csize][2]
    if nlanes >= cfg["rows_block_fill"] * _sm_count(cupy_mod()) * minb:
        # enough rows to fill the device: a block per row, looping along it, no look-back; rows_wide
        # where every group is an aligned vector of the widest width, a and b read in one
        # direction and storage as wide as the compute type (tuning.py)
        wide = cfg.get("rows_wide", {}).get(csize)
        if wide is not None and G == Gmax and widest == csize and vec[1] and vec[2] and (ac or (vec[0] and ta == tb)):
            name = k.wide(tb)
            return _Plan(kind="rows_wide", name=name, grid=nlanes, threads=wide[0],
                         **{**common, "group": (*common["group"], name)})
        return _Plan(kind="rows_block", name=names["rows_block"], grid=nlanes, threads=NT_b, vec=vec, **common)
    kt = -(-T // tile_l)
    grid = nlanes * kt
    if grid >= 2**31:
        raise ValueError(f"scan of {nlanes} rows x {T} steps needs {grid} tiles, more than one launch takes")
    return _Plan(kind="rows_tiles", name=names["rows_long"], grid=grid, threads=NT_l, vec=vec, kt=kt,
                 rec_size=_rec_size(dt), slots=grid, **common)


def cupy_mod():
    import cupy

    return cupy


_sms: dict = {}
_cc: dict = {}


def _staging_device(cupy):
    """Whether long rows stage their tiles in shared memory on the current device: compute
    capability 9.0 or more, the devices it was measured on (cp.async itself needs 8.0)."""
    dev = cupy.cuda.Device().id
    ok = _cc.get(dev)
    if ok is None:
        ok = _cc[dev] = int(cupy.cuda.Device(dev).compute_capability) >= 90
    return ok


def _sm_count(cupy):
    dev = cupy.cuda.Device().id
    n = _sms.get(dev)
    if n is None:
        n = _sms[dev] = cupy.cuda.Device(dev).attributes["MultiProcessorCount"]
    return n


def _b(x):
    return "true" if x else "false"


def _rec_size(dt):
    """Bytes of one tile status (``TileStatus<Pair<C>>`` in lookback.cuh): each 32-bit piece of the
    pair ``(A, B)`` in a 64-bit word next to the flag."""
    return 4 * dt.itemsize


# --------------------------------------------------------------------------- workspaces
# Tile statuses live in a workspace per (device, stream, record size), zeroed once when allocated.
# Each call gets a new epoch (statuses of older calls read as "not ready"), so no call pays for a
# memset; calls on one stream are ordered, calls on different streams use different workspaces.
# A launch captured in a CUDA graph replays with the epoch it was captured with, so a replay would
# read the previous replay's statuses as its own: there the statuses are zeroed by a memset
# captured before the launch (CUB's tile-state initialisation, every replay).

_ws_lock = threading.Lock()
_workspaces: dict = {}


class _Workspace:
    """Tile statuses of one (device, stream, record size).

    A launch takes them under ``with ws.launching():``, which holds the lock (two host threads may
    launch on one stream) and, if the launch raised nothing, starts a new epoch.
    """

    #: epochs before the statuses are zeroed again (the flag word keeps 30 bits of it)
    epoch_limit = 2**29

    def __init__(self, cupy, nbytes):
        self.buffer = cupy.zeros(nbytes, dtype=cupy.uint8)
        self.ptr = self.buffer.data.ptr
        self.nbytes = nbytes
        self.epoch = 1
        self.lock = threading.Lock()

    def launching(self):
        self.lock.acquire()
        return self

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        try:
            if exc_type is None:
                self.epoch += 1
                if self.epoch >= self.epoch_limit:
                    self.buffer.fill(0)
                    self.epoch = 1
        finally:
            self.lock.release()
        return False


def _workspace(cupy, rec_size, slots):
    return _workspace_at(cupy.cuda.Device().id, cupy.cuda.get_current_stream().ptr, rec_size, slots)


def _workspace_at(dev, stream_ptr, rec_size, slots):
    """The workspace of (device, stream) for statuses of ``rec_size`` bytes, at least ``slots`` of
    them; ``dev`` must be the current device (a new one is allocated there). On a stream being
    captured into a CUDA graph, its statuses zeroed first in the graph."""
    need = rec_size * slots
    key = (dev, stream_ptr, rec_size)
    runtime = cupy_mod().cuda.runtime
    capturing = runtime.streamIsCapturing(stream_ptr)
    with _ws_lock:
        ws = _workspaces.get(key)
        if ws is None or ws.nbytes < need:
            if capturing:
                raise RuntimeError(
                    f"scanarray: this launch chains {slots} tiles through a workspace of {need} bytes that "
                    "stream has not allocated yet, and memory cannot be allocated while the stream is being "
                    "captured into a CUDA graph: run the same call once on the capturing stream before the "
                    "capture (a warm-up), or capture a shorter scan")
            # grow geometrically; the old buffer goes back to CuPy's pool on this stream
            ws = _Workspace(cupy_mod(), max(need, 2 * ws.nbytes if ws is not None else 1 << 20))
            _workspaces[key] = ws
    if capturing:
        runtime.memsetAsync(ws.ptr, 0, need, stream_ptr)
    return ws

