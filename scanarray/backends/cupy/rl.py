"""The one-pass GAE kernels (``cuda/rl.cu``): :func:`scanarray.rl.gae` and
:func:`scanarray.rl.discounted_returns` of CuPy arrays laid out time-major (environments closer in
memory than steps, as RL rollout buffers are).

One launch reads rewards, values and flags once and writes the advantages once; the TD residual
and the reset-aware coefficient are formed as the steps are loaded. Discounted returns are the
advantages of no values with ``lam = 1``, the values left unread. With many lanes a thread walks
one lane's whole time axis (``gae_walk``); with fewer, tiles of steps chain along time by
look-back (``gae_lanes``). Other layouts take the fused elementwise pass and the core's reverse
scan (:mod:`.elementwise`).
"""

from __future__ import annotations

import functools

import numpy as np

from ... import _dtypes
from .._layout import element_strides, merge_axes
from . import _common
from .tuning import TUNING

__all__ = ["gae", "instantiations"]

_REAL = ("float32", "float64")
# the flags' dtypes the kernel reads as they are (others are converted by the caller's path)
_FLAGS = {"bool": "bool", "int8": "signed char", "uint8": "unsigned char", "float32": "float", "float64": "double"}


@functools.lru_cache(maxsize=None)
def _kernels(dtype, lanes, lanes_vec, walk):
    """{(flags dtype, kind): instantiation} for data of ``dtype`` and the tuning entries' tuples
    (each call would otherwise format them again)."""
    ct = _dtypes.ctype(dtype)
    out = {}
    for f, fc in _FLAGS.items():
        for kind, (nw, items, q, minb) in (("lanes", lanes), ("lanes_vec", lanes_vec)):
            out[(f, kind)] = f"scanarray::rl::gae_lanes<{ct}, {fc}, {ct}, {nw}, {items}, {q}, {minb}>"
        for trunc in (False, True):
            out[(f, ("walk", trunc))] = f"scanarray::rl::gae_walk<{ct}, {fc}, {ct}, {walk[1]}, {str(trunc).lower()}>"
    return out


def _names(dtype, tuning):
    item = np.dtype(dtype).itemsize
    return _kernels(np.dtype(dtype).name, tuning["gae_lanes"][item], tuning["gae_lanes_vec"][item],
                    tuning["gae_walk"][item])


def instantiations(dtype=None, tuning=TUNING):
    """Every kernel the driver can name, for ``dtype`` (default: both real dtypes; for
    tools/compile_cuda.py)."""
    return list(dict.fromkeys(n for d in ((dtype,) if dtype else _REAL) for n in _names(d, tuning).values()))


# plans by call signature (shapes, strides, dtypes, each array's alignment, parameters and the tuning entries read):
# a repeated call only allocates its result and launches
_plans: dict = {}


def gae(r, v, d, gamma, lam, boot, axis, tuning=TUNING, tiles=True, terminated=None, next_values=None):
    """GAE's advantages in one kernel, or None where it does not take the arrays.

    ``r``, ``v``: float32/float64 CuPy arrays of one shape and dtype (``v`` None: no values, the
    discounted returns when ``lam`` is 1); ``d``: the flags, of that
    shape (bool, int8, uint8 or a float dtype, read as they are); ``boot``: None or an array
    broadcastable to the lanes (the shape without ``axis``); ``gamma``, ``lam``: Python floats.
    Takes time-major data (one lane axis after merging, its stride smaller than the time
    stride's in ``r``) of at least ``tuning["gae_walk_min_lanes"]`` lanes, or else of at most
    ``tuning["gae_lanes_max_steps"]`` steps (each lane's tiles chain along time: a long chain is
    slower than the two passes), the latter only with ``tiles`` (the discounted returns' two passes
    move fewer bytes than GAE's, and measured faster than the tiles); returns a new array of
    ``r``'s shape. ``terminated``, ``next_values``: None, or arrays of ``r``'s shape (flags as
    ``d``; ``next_values`` of ``r``'s dtype): Gymnasium's truncations, as :func:`scanarray.rl.gae`
    takes them, by the walk only.
    """
    import cupy

    from .scan import _workspace

    if terminated is not None and terminated.dtype != d.dtype:  # (both flags in one dtype: the data's)
        d, terminated = d.astype(r.dtype), terminated.astype(r.dtype)
    item = r.dtype.itemsize
    trunc = tuple(None if z is None else (z.shape, z.strides, z.dtype) for z in (next_values, terminated))
    key = (r.shape, r.strides, r.dtype, None if v is None else (v.shape, v.strides, v.dtype), d.shape, d.strides,
           d.dtype, boot is not None, axis, gamma, lam, tiles, trunc,
           r.data.ptr % 16, d.data.ptr % 16, 0 if v is None else v.data.ptr % 16,  # (each array's: the vector path)
           *(tuning[k].get(item) for k in ("gae_walk_min_lanes", "gae_lanes_max_steps", "gae_walk", "gae_lanes",
                                            "gae_lanes_vec")))
    plan = _plans.get(key, False)
    if plan is False:
        plan = _plan(r, v, d, gamma, lam, boot is not None, axis, tuning, tiles, next_values, terminated)
        if len(_plans) >= 256:
            _plans.clear()
        _plans[key] = plan
    if plan is None:
        return None
    fn, grid, threads, lanes, tail, ws_need = plan
    y = cupy.empty_like(r)
    b = r
    if boot is not None:
        b = boot
        if not (isinstance(b, cupy.ndarray) and b.dtype == r.dtype and b.shape == lanes and b.flags.c_contiguous):
            b = cupy.ascontiguousarray(cupy.broadcast_to(cupy.asarray(boot, dtype=r.dtype), lanes))
    args = (r.data.ptr, r.data.ptr if v is None else v.data.ptr, d.data.ptr, b.data.ptr, y.data.ptr)
    if ws_need is None:  # the walk
        nv, tm = (r if z is None else z for z in (next_values, terminated))
        _common.launch(cupy, fn, grid, threads, args + (nv.data.ptr, tm.data.ptr) + tail)
        return y
    args += tail
    ws = _workspace(cupy, *ws_need)
    with ws.launching():
        _common.launch(cupy, fn, grid, threads, args + (ws.ptr, np.uint32(ws.epoch)))
    return y


def _plan(r, v, d, gamma, lam, has_boot, axis, tuning, tiles, nv, tm):
    """``(kernel, grid, threads, lanes shape, arguments after the pointers, workspace (record
    bytes, records) or None: the walk)`` of :func:`gae`'s call, or None where it does not take the
    arrays."""
    import cupy

    if r.dtype.name not in _REAL or d.dtype.name not in _FLAGS or r.ndim < 2:
        return None
    trunc = nv is not None or tm is not None
    if (nv is not None and (nv.dtype != r.dtype or nv.shape != r.shape)) or (tm is not None and tm.shape != r.shape):
        return None
    T = r.shape[axis]
    has_v = v is not None
    rm, vm, dm, nm, tmm = (cupy.moveaxis(r if z is None else z, axis, -1) for z in (r, v, d, nv, tm))
    ym = cupy.moveaxis(cupy.empty_like(r), axis, -1)  # (the layout of every call's result)
    strides = [element_strides(z) for z in (rm, vm, dm, ym, nm, tmm)]
    lanes, ls = merge_axes(list(rm.shape[:-1]), [s[:-1] for s in strides], drop_ones=True)
    item = r.dtype.itemsize
    time_major = len(lanes) == 1 and abs(ls[0][0]) < abs(strides[0][-1])
    if not time_major or T < 2:
        return None
    L = lanes[0]
    walk = L >= tuning["gae_walk_min_lanes"][item]
    if not walk and (trunc or not tiles or T > tuning["gae_lanes_max_steps"][item]):
        return None
    if walk:
        kind = ("walk", trunc)
    else:  # the tiles: a thread's lanes as one vector access where contiguous in every array, and aligned
        q = tuning["gae_lanes_vec"][item][2]
        vec = (L % q == 0 and all(z[0] == 1 for z in ls) and all(s[-1] % q == 0 for s in strides)
               and all(z.data.ptr % (q * z.itemsize) == 0 for z in (rm, vm, dm, ym)))
        kind = "lanes_vec" if vec else "lanes"
    names = _names(r.dtype, tuning)
    fn = _common.get_function("rl.cu", names[(d.dtype.name, kind)], group=tuple(dict.fromkeys(names.values())))
    C = np.float32 if item == 4 else np.float64
    (lr, lv, ld, ly, ln, lm), (tr, tv, td, ty, tn, tmt) = (z[0] for z in ls), (s[-1] for s in strides)
    tail = (np.int64(T), np.int64(L), np.int64(lr), np.int64(tr), np.int64(lv), np.int64(tv), np.int64(ld),
            np.int64(td), np.int64(1 if has_boot else 0), np.int64(ly), np.int64(ty))
    flags = (np.int32(has_boot), np.int32(has_v))
    if walk:
        threads = tuning["gae_walk"][item][0]
        tail += (np.int64(ln), np.int64(tn), np.int64(lm), np.int64(tmt)) + flags + (
            np.int32(nv is not None), np.int32(tm is not None), C(gamma), C(gamma * lam))
        return fn, -(-L // threads), threads, rm.shape[:-1], tail, None
    nw, items, q, _ = tuning[f"gae_{kind}"][item]
    kt = -(-T // (nw * items))
    groups = -(-L // (32 * q))
    # TileStatus<Pair<C>, true>::BYTES (cuda/lookback.cuh): twice the pair
    return (fn, groups * kt, nw * 32, rm.shape[:-1], tail + flags + (np.int32(kt), C(gamma), C(gamma * lam)),
            (4 * item, groups * kt * 32 * q))
