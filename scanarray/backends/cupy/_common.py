"""Shared helpers of the CuPy kernels: the one compile-and-cache path, packed launches, bound calls.

Kernels live as ``.cu``/``.cuh`` files in ``scanarray/backends/cupy/cuda`` (package data),
are compiled at run time by NVRTC through :class:`cupy.RawModule` (:func:`get_function`, the
only compile path), lazily, once per device and instantiation, in the manner of CuPy's own
``cupyx.scipy.signal`` kernels. CuPy caches the binaries on disk too. C++ type names come
from the dtype table (:func:`scanarray._dtypes.ctype`).

The sources include no toolkit header (NVRTC may miss them on a user's machine: ``cannot open
source file "crt/mma.h"``), only each other, expanded by :func:`read_source`.
"""

from __future__ import annotations

import functools
import os
import re
import threading

import numpy as np

__all__ = [
    "SOURCE_DIR",
    "Binder",
    "PackedLauncher",
    "compile_options",
    "extent",
    "get_function",
    "raw_args",
    "read_source",
]

#: where the kernel sources are installed
SOURCE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cuda")

_lock = threading.Lock()
_modules: dict = {}


def compile_options(*extra: str) -> tuple[str, ...]:
    """NVRTC options: C++17 and ``extra`` (the sources include no toolkit header: see the module doc)."""
    return ("-std=c++17",) + extra


_INCLUDE = re.compile(r'^\s*#include "([^"]+)"\s*$')


@functools.lru_cache(maxsize=None)
def read_source(name: str) -> str:
    """The text of ``cuda/<name>`` with its local ``#include "x.cuh"`` lines expanded, each header once.

    Expanded, because CuPy's on-disk kernel cache is keyed by the source text: an edited
    header must change the key.
    """
    seen: set[str] = set()

    def expand(fname):
        with open(os.path.join(SOURCE_DIR, fname), encoding="utf-8") as f:
            lines = f.read().splitlines()
        out = []
        for line in lines:
            m = _INCLUDE.match(line)
            if m and os.path.exists(os.path.join(SOURCE_DIR, m.group(1))):
                if m.group(1) not in seen:
                    seen.add(m.group(1))
                    out.extend(expand(m.group(1)))
            elif line.strip() != "#pragma once":
                out.append(line)
        return out

    return "\n".join(expand(name)) + "\n"


def get_function(source: str, name_expression: str, options: tuple[str, ...] = (), group: tuple[str, ...] = ()):
    """The compiled kernel ``name_expression`` of ``cuda/<source>`` on the current device.

    One :class:`cupy.RawModule` per (device, source, instantiations, options),
    built on first use and kept. ``group`` names sibling instantiations to
    compile in the same NVRTC call (one front-end pass for all of them), which
    is much cheaper than one call each when a dtype is first used.
    """
    import cupy

    dev = cupy.cuda.Device().id
    key = (dev, source, name_expression, options)
    fn = _modules.get(key)
    if fn is None:
        with _lock:
            fn = _modules.get(key)
            if fn is None:
                names = [name_expression] + [g for g in group if g != name_expression]
                opts = compile_options(*options)
                mod = cupy.RawModule(code=read_source(source), options=opts, name_expressions=names)
                for name in names:
                    _modules[(dev, source, name, options)] = mod.get_function(name)
                fn = _modules[key]
    return fn


# struct codes of the NumPy scalar types our kernels take
_STRUCT_CODES = {np.dtype(np.int32): "i", np.dtype(np.uint32): "I", np.dtype(np.int64): "q",
                 np.dtype(np.uint64): "Q", np.dtype(np.float32): "f", np.dtype(np.float64): "d"}


class PackedLauncher:
    """Launches one compiled kernel with all its arguments packed into a single buffer.

    ``RawKernel.__call__`` converts its arguments one by one, which costs about
    10 µs for the ~30 arguments of the scan kernels (docs/guide/gpu.md),
    a third of a small call's host time. Here one :func:`struct.pack_into` call
    lays them out in one buffer as the kernel's parameter list (each parameter
    at a multiple of its size), and ``cuLaunchKernel`` gets an array of
    pointers into it, made once per buffer. (Passing the buffer itself through
    ``CU_LAUNCH_PARAM_BUFFER_POINTER`` needs its exact size: a kernel whose
    parameters end 4 bytes short of a multiple of 8 refused a rounded-up size
    with ``CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES``.) Same stream,
    device and (asynchronous) semantics as CuPy's launch.

    :meth:`create` takes a sample argument tuple (device arrays, which pass
    their pointer, device pointers as Python ints, and NumPy scalars);
    :meth:`launch` must get arguments of the same kinds in the same order.
    ``create`` returns None where this does not apply (an argument of another
    type, a CuPy without ``Function.ptr``); callers then use the ``RawKernel``
    call (see :func:`raw_args`).
    """

    def __init__(self, fptr, pieces, size, arrays, offsets):
        import struct

        self._fptr = fptr
        self._offsets = np.asarray(offsets, np.uint64)
        # pieces[i]: argument i's struct code after the pad bytes that align it
        self._pieces = pieces
        self._pack = struct.Struct("<" + "".join(pieces)).pack_into
        self._size = size
        self._arrays = arrays
        self._local = threading.local()

    @classmethod
    def create(cls, fn, sample):
        try:
            fptr = int(fn.kernel.ptr)
        except (AttributeError, TypeError, ValueError):  # pragma: no cover - a CuPy without it
            return None
        pieces, off, arrays, offsets = [], 0, [], []
        for i, x in enumerate(sample):
            if isinstance(x, np.generic):
                code = _STRUCT_CODES.get(x.dtype)
                if code is None:
                    return None
                size = x.dtype.itemsize
            elif type(x) is int:  # a device pointer
                code, size = "Q", 8
            elif hasattr(x, "data") and hasattr(x.data, "ptr"):
                code, size = "Q", 8
                arrays.append(i)
            else:
                return None
            pad = -off % size
            pieces.append("x" * pad + code)
            offsets.append(off + pad)
            off += pad + size
        return cls(fptr, tuple(pieces), max(8, off), tuple(arrays), offsets)

    def _new_buffers(self):
        """``(buffer, pointers, address of pointers)``: a parameter buffer and the ``kernelParams``
        array of ``cuLaunchKernel``, one pointer into it per parameter."""
        buf = np.zeros(self._size, np.uint8)
        params = self._offsets + np.uint64(buf.ctypes.data)
        return buf, params, int(params.ctypes.data)

    def _buffers(self):
        # one parameter buffer per thread: two threads may launch the same plan at once
        bufs = getattr(self._local, "bufs", None)
        if bufs is None:
            bufs = self._local.bufs = self._new_buffers()
        return bufs

    def _packer(self, first, stop):
        """``(pack_into, offset)`` writing arguments ``first`` to ``stop - 1`` (and the pad bytes
        before each) in place in a parameter buffer."""
        import struct

        at = sum(struct.calcsize("<" + p) for p in self._pieces[:first])
        return struct.Struct("<" + "".join(self._pieces[first:stop])).pack_into, at

    def bind(self, grid, threads, template, b_at=None, shared_mem=0, workspace=None, tail=0, tail_ptrs=0):
        """``go(stream_ptr, pa, pb, po, ph0, *extra)``: this launch with the arguments of
        ``template`` (a sample argument list holding no arrays) but its first five replaced by the
        pointers and a flag (``ph0`` None: pass ``pb`` and 0), at ``b_at`` by ``pb`` again (a
        pointer argument that only needs to be valid), and the first ``tail_ptrs`` of its ``tail``
        trailing arguments by ``extra`` (pointers). For calls bound to a signature, where the rest
        of the arguments never change.

        A look-back launch passes ``workspace``: ``workspace(stream_ptr)`` gives the launch's
        workspace (``scan._Workspace``), whose pointer and epoch replace the template's last
        arguments but one before its ``tail`` trailing ones (``scan._Plan._args``).

        The template is packed once into each thread's parameter buffer of this binding; a call
        packs only the arguments that change (converting the ~30 others cost ~0.7 µs a call)."""
        from cupy.cuda import driver

        if self._arrays:
            return None
        fptr, launch, full = self._fptr, driver.launchKernel, self._pack
        head, _ = self._packer(0, 5)
        one, zero = np.int32(1), np.int32(0)
        local = threading.local()
        n = len(template) - tail
        x_pack, x_at = self._packer(n, n + tail_ptrs) if tail_ptrs else (None, 0)

        def buffers():
            bufs = getattr(local, "bufs", None)
            if bufs is None:
                bufs = local.bufs = self._new_buffers()
                full(bufs[0], 0, *template)
            return bufs

        if workspace is not None:
            ws_pack, ws_at = self._packer(n - 3, n - 1)

            def go(stream_ptr, pa, pb, po, ph0, *extra):
                ws = workspace(stream_ptr)
                buf, _, params = buffers()
                with ws.launching():
                    if ph0 is None:
                        head(buf, 0, pa, pb, po, pb, zero)
                    else:
                        head(buf, 0, pa, pb, po, ph0, one)
                    ws_pack(buf, ws_at, ws.ptr, ws.epoch)
                    if extra:
                        x_pack(buf, x_at, *extra)
                    launch(fptr, grid, 1, 1, threads, 1, 1, shared_mem, stream_ptr, params, 0)

            return go

        b_pack, b_off = self._packer(b_at, b_at + 1) if b_at is not None else (None, 0)

        def go(stream_ptr, pa, pb, po, ph0, *extra):
            buf, _, params = buffers()
            if ph0 is None:
                head(buf, 0, pa, pb, po, pb, zero)
            else:
                head(buf, 0, pa, pb, po, ph0, one)
            if b_pack is not None:
                b_pack(buf, b_off, pb)
            if extra:
                x_pack(buf, x_at, *extra)
            launch(fptr, grid, 1, 1, threads, 1, 1, shared_mem, stream_ptr, params, 0)

        return go

    def bind_roles(self, grid, threads, shared_mem, template, roles):
        """``go(stream_ptr, vals)``: this launch with the arguments of ``template`` (holding no
        arrays), except argument ``i`` set to ``vals[slot] + offset`` for each ``(i, slot, offset)``
        of ``roles``. For calls bound to a signature whose launches take their pointers and
        workspace at any positions (the dense kernels); only those arguments are packed per call."""
        import struct

        from cupy.cuda import driver

        if self._arrays:
            return None
        fptr, launch, full = self._fptr, driver.launchKernel, self._pack
        packers = tuple((struct.Struct("<" + self._pieces[i].lstrip("x")).pack_into, int(self._offsets[i]), slot, offset)
                        for i, slot, offset in roles)
        local = threading.local()

        def go(stream_ptr, vals):
            bufs = getattr(local, "bufs", None)
            if bufs is None:
                bufs = local.bufs = self._new_buffers()
                full(bufs[0], 0, *template)
            buf = bufs[0]
            for pack, at, slot, offset in packers:
                pack(buf, at, vals[slot] + offset)
            launch(fptr, grid, 1, 1, threads, 1, 1, shared_mem, stream_ptr, bufs[2], 0)

        return go

    def launch(self, cupy, grid, threads, args, shared_mem=0):
        buf, _, params = self._buffers()
        if self._arrays:
            args = list(args)
            for i in self._arrays:
                args[i] = args[i].data.ptr
        self._pack(buf, 0, *args)
        cupy.cuda.driver.launchKernel(self._fptr, grid, 1, 1, threads, 1, 1, shared_mem,
                                      cupy.cuda.get_current_stream().ptr, params, 0)


def extent(x):
    """Byte range ``(lo, hi)`` of ``x``'s elements relative to its data pointer."""
    lo = hi = 0
    for n, st in zip(x.shape, x.strides):
        if st < 0:
            lo += (n - 1) * st
        else:
            hi += (n - 1) * st
    return lo, hi + x.itemsize


class Binder:
    """What one call launched, to bind to the caller's arrays (``Problem.bind``).

    A loop calling the public function on arrays of one signature (shapes, strides, dtypes,
    arguments) repeats the same validation, views and plan lookup every time: 28-45 us of host
    time a diagonal call on the H200's host, 41-236 us a dense one (docs/guide/gpu.md), while a
    small scan runs for a few. The public function keeps, per signature, the bound call this makes
    (:mod:`scanarray._bound`), which checks what the signature does not fix (device, pointer
    alignment, overlap of ``out`` with the inputs) and repeats the launches on the new pointers;
    any difference sends the call through the full path.

    ``plan_`` has ``launch_ptrs(cupy, pa, pb, po, ph0, dev)`` (the launches on device pointers of
    the canonical views: ``a``, ``b``, the result and the initial state, None for zeros) and
    ``direct(dev)`` (a faster ``go(stream_ptr, pa, pb, po, ph0)`` doing the same, or None);
    ``pa`` ... ``ph0`` are the pointers this call launched on; ``epi``, the trailing arguments of
    a fused scale (``scan._Plan.launch_ptrs``).
    """

    def __init__(self, plan_, dev, pa, pb, po, ph0, epi=()):
        self.plan, self.dev = plan_, dev
        self.ptrs = (pa, pb, po, ph0)
        self.epi = epi

    def __call__(self, a, a_const, b, h0, result, alloc):
        """A function ``call(a, b, h0, out)`` repeating this launch on new arrays of the same
        signature; it returns the result, or None where the full path must decide. With
        ``a_const``, ``a`` is the 0-d device array the full path made of a Python scalar: the
        bound call keeps it and reads it instead of its own ``a`` (the same value).

        ``call.raw`` (None where the plan has no direct launch) is the launch alone on raw
        pointers, ``raw(stream_ptr, pa, pb, ph0, po) -> bool``, for a caller that owns the checks
        of ``call`` (the torch and JAX front-ends: one device, and a new result overlapping nothing)."""
        import cupy

        plan_, dev = self.plan, self.dev
        pa, pb, po, ph0 = self.ptrs
        # With one visible device every array and the current device are that one: the checks
        # of devices below are skipped (not timed apart from the rest of the change).
        multi = cupy.cuda.runtime.getDeviceCount() > 1
        getdev, stream = cupy.cuda.runtime.getDevice, cupy.cuda.get_current_stream
        # the caller's pointers this call launched on, and the views' offsets from them; a new
        # pointer keeps the planned alignment (modulo 16) where it differs by a multiple of 16
        ra0, rb0, ro0 = a.data.ptr, b.data.ptr, result.data.ptr
        off_a, off_b, off_o = pa - ra0, pb - rb0, po - ro0
        stream0 = stream().ptr
        ext_a, ext_b, ext_o = extent(a), extent(b), extent(result)
        ext_h = None if h0 is None else extent(h0)
        if h0 is not None and ph0 != h0.data.ptr:
            return None
        const = a if a_const else None
        epi = self.epi
        # None: launch through the plan (a kernel launched through CuPy's call); dense plans take no epi
        go = plan_.direct(dev, epi) if epi else plan_.direct(dev)
        relaunch = functools.partial(plan_.launch_ptrs, epi=epi) if epi else plan_.launch_ptrs
        # out=b exactly is the one overlap allowed (shapes and dtypes are in the signature)
        in_place_ok = result.shape == b.shape and result.strides == b.strides and result.dtype == b.dtype

        def raw(stream_ptr, ra, rb, rh, ro):
            if const is not None:
                ra = const.data.ptr  # the bound call keeps the constant alive
                if stream_ptr != stream0:  # it was copied to the device on stream0
                    return False
            if ((ra - ra0) | (rb - rb0) | (ro - ro0)) & 15:
                return False
            qa, qb, qo = ra + off_a, rb + off_b, ro + off_o
            if go is not None:
                go(stream_ptr, qa, qb, qo, rh)
            else:  # on CuPy's current stream, which ``call`` passed as stream_ptr
                relaunch(cupy, qa, qb, qo, rh, dev)
            return True

        def call(a_, b_, h0_, out_):
            db = b_.data
            if multi and (getdev() != dev or db.device_id != dev):
                return None
            rb = db.ptr
            ra = rh = None
            if const is None:
                da = a_.data
                if multi and da.device_id != dev:
                    return None
                ra = da.ptr
            if h0_ is not None:
                dh = h0_.data
                if multi and dh.device_id != dev:
                    return None
                rh = dh.ptr
            if out_ is None:
                res = alloc(b_)
                ro = res.data.ptr
            else:
                do = out_.data
                if multi and do.device_id != dev:
                    return None
                res, ro = out_, do.ptr
                # an out overlapping an input (other than out=b itself) needs the full path's copies
                lo, hi = ro + ext_o[0], ro + ext_o[1]
                if not (ro == rb and in_place_ok) and lo < rb + ext_b[1] and rb + ext_b[0] < hi:
                    return None
                if const is None and lo < ra + ext_a[1] and ra + ext_a[0] < hi:
                    return None
                if h0_ is not None and lo < rh + ext_h[1] and rh + ext_h[0] < hi:
                    return None
            return res if raw(stream().ptr, ra, rb, rh, ro) else None

        call.raw = raw if go is not None else None
        return call


_packed: dict = {}


def launcher(fn, args=None):
    """The :class:`PackedLauncher` of compiled kernel ``fn``, made from ``args`` on first use (the
    arguments of every launch of ``fn`` then keep their kinds: device arrays, pointers as Python
    ints, NumPy scalars); None where it does not apply, or before a first use without ``args``."""
    entry = _packed.get(id(fn))
    if entry is None:
        if args is None:
            return None
        # (the entry holds fn, so its id is not reused while the launcher is kept)
        entry = _packed[id(fn)] = (PackedLauncher.create(fn, args), fn)
    return entry[0]


def launch(cupy, fn, grid, threads, args, shared_mem=0):
    """``fn`` over ``grid`` blocks of ``threads`` on CuPy's current stream: through its
    :func:`launcher` (about 5 µs of host time less), else CuPy's call."""
    packed = launcher(fn, args)
    if packed is not None:
        packed.launch(cupy, grid, threads, args, shared_mem)
    else:
        fn((grid,), (threads,), raw_args(args), shared_mem=shared_mem)


def raw_args(args):
    """``args`` for CuPy's ``RawKernel`` call: device pointers given as Python ints become
    ``numpy.uint64``, so that each is passed as the kernel's 8-byte pointer parameter by value
    whatever integer type CuPy would give a Python int."""
    return tuple(np.uint64(x) if type(x) is int else x for x in args)

