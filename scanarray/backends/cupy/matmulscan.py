"""Tensor-core MatMulScan (Zouzias & McColl, arXiv 2411.17887) for the CuPy backend.

Tensor cores only do real work when one scan matrix serves many lanes, so this
method takes the problems where ``a`` is *shared across lanes*:

- ``a`` a scalar or size-1 array, ``a == 1`` included (prefix sums);
- ``a`` varying along time only, e.g. shape ``(T, 1)`` against ``b (T, n)``;
- ``a`` broadcast along some lane axes, e.g. the inter-chunk state of chunked
  linear RNNs (Mamba-2/SSD, GLA): ``a (BH, G, 16, 1)`` against ``b (BH, G, 16, 64)``
  scanned along ``G``: every group of 64 lanes shares one decay sequence.

The lanes are split into *groups* (lane axes along which ``a`` varies) and
*shared* lanes (axes where ``a`` has stride 0). For each group the kernel
multiplies 16-step chunks of the ``(T, P_shared)`` matrix of ``b`` by the
block-diagonal decay matrix ``D[i, j] = a[j+1]...a[i]`` (radix ``s`` blocks);
see ``cuda/matmulscan.cu`` for the algorithm and the precision scheme
(3xTF32 for float32, split bf16 for float16/bfloat16, DMMA for float64).

Problems where no matrix is shared (``a`` varying per lane, complex dtypes,
a device older than sm_80) go to the ``lookback`` method: tensor cores have
nothing to share there. :func:`unsupported_reason` says why, and
``strict=True`` raises instead.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from ... import _dtypes
from .._layout import element_strides as _estrides, merge_axes as _merge
from . import _common
from .tuning import TUNING

__all__ = ["instantiations", "linear_recurrence", "unsupported_reason"]

#: storage dtypes the tensor-core kernels take (``TileMma`` in matmulscan.cu; no complex arithmetic
#: on tensor cores): others run the lookback method
_REAL = ("float16", "bfloat16", "float32", "float64")


def _kernel(radix: int, tb: str, ta: str):
    """The compiled kernel (``_common.get_function``: once per device and instantiation).
    Header-free source (inline PTX mma.sync): NVRTC's missing crt/mma.h does not matter here."""
    return _common.get_function("matmulscan.cu", f"scanarray::matmulscan_warp_kernel<{radix}, {tb}, {ta}>")


def instantiations():
    """Every kernel (matmulscan.cu) the driver can name: each radix, each real storage dtype of b
    with a in that dtype or its accumulation dtype (for tools/compile_cuda.py)."""
    names = []
    for out in _REAL:
        tb, tacc = _dtypes.ctype(out), _dtypes.ctype(_dtypes.DTYPES[out].accumulate)
        for ta in dict.fromkeys((tb, tacc)):
            names += [f"scanarray::matmulscan_warp_kernel<{radix}, {tb}, {ta}>" for radix in (4, 8, 16)]
    return names


def _device_ok():
    import cupy

    dev = cupy.cuda.Device()
    return dev.id, int(dev.compute_capability) >= 80


def unsupported_reason(p) -> str | None:
    """Why the tensor-core path cannot take problem ``p`` (``None`` when it can)."""
    if p.dense:
        return "dense=True (use cyclic_reduction)"
    if np.dtype(p.out_dtype).name not in _REAL:
        return f"dtype {np.dtype(p.out_dtype).name}: tensor cores have no complex arithmetic"
    b, a = p.b, p.a
    lanes = range(b.ndim - 1)
    shared = [i for i in lanes if b.shape[i] > 1 and a.strides[i] == 0]
    groups = [i for i in lanes if b.shape[i] > 1 and a.strides[i] != 0]
    if not shared and groups:
        return ("a varies per lane, so no decay matrix is shared across lanes "
                "(matmulscan needs a scalar a, a shared along a lane axis, or a varying along time only)")
    if not _device_ok()[1]:
        return "the device is older than sm_80 (no mma.sync for tf32/bf16/f64)"
    return None


def linear_recurrence(p, radix=None, strict=False, prefetch=None):
    """Scan problem ``p`` (diagonal form) with tensor-core MatMulScan; write ``p.out``.

    Parameters
    ----------
    p : scanarray._problem.Problem
        Canonical problem on CuPy arrays (time axis last).
    radix : {4, 8, 16}, optional
        Size ``s`` of the radix-s groups batched into one 16 x 16 tensor-core
        operand. Default: ``TUNING["matmulscan_radix"]``.
    strict : bool, optional
        Raise ``ValueError`` for problems the tensor-core path cannot take
        instead of running them with the look-back method.
    prefetch : bool, optional
        Load the next 16-step chunk of ``b`` while the current one is computed.
        Default: on, except for float16/bfloat16 (``TUNING["matmulscan_prefetch_half"]``).
    """
    reason = unsupported_reason(p)
    if reason is not None:
        if strict:
            raise ValueError(f"method='matmulscan' cannot take this problem: {reason}")
        from . import scan as _cupy_scan

        return _cupy_scan.linear_recurrence(dataclasses.replace(p, method="lookback"))
    radix = TUNING["matmulscan_radix"] if radix is None else int(radix)
    if radix not in (4, 8, 16):
        raise ValueError(f"radix must be 4, 8 or 16; got {radix}")
    _run(p, radix, prefetch)
    return p.out


def _run(p, radix, prefetch):
    import cupy

    b, a, out = p.b, p.a, p.out
    if p.reverse:  # views with negative time strides: no flipped copies
        b, a, out = b[..., ::-1], a[..., ::-1], out[..., ::-1]
    nd = b.ndim
    T = b.shape[-1]
    lanes = range(nd - 1)
    shared = [i for i in lanes if b.shape[i] > 1 and a.strides[i] == 0]
    groups = [i for i in lanes if b.shape[i] > 1 and a.strides[i] != 0]
    keep = [i for i in lanes if b.shape[i] == 1]  # size-1 lane axes: dropped (index 0)
    perm = keep + groups + [nd - 1] + shared
    ng = len(groups)
    gshape = [b.shape[i] for i in groups]
    pshape = [b.shape[i] for i in shared]
    G = math.prod(gshape)
    P = math.prod(pshape)
    out_name = np.dtype(p.out_dtype).name
    acc = _dtypes.accumulation(out_name)

    def view(x):  # (groups..., T, shared...), no copy
        return x.transpose(perm)[(0,) * len(keep)]

    bt, ot = view(b), view(out)
    at = view(a)[(Ellipsis,) + (0,) * len(shared)]  # (groups..., T)

    if np.dtype(b.dtype) != np.dtype(p.out_dtype):
        bt = bt.astype(p.out_dtype)  # a cast copy, contiguous in this order
    tb = _dtypes.ctype(out_name)
    a_name = np.dtype(a.dtype).name
    if a_name == out_name:
        ta = tb
    elif a_name == acc.name:
        ta = _dtypes.ctype(a_name)
    else:
        at = at.astype(acc)
        ta = _dtypes.ctype(acc)

    # Collapse group axes (b, out, a together) and shared axes (b, out) as far as strides allow.
    gs, (b_g, o_g, a_g) = _merge(gshape, [_estrides(bt)[:ng], _estrides(ot)[:ng], _estrides(at)[:ng]])
    ps, (b_p, o_p) = _merge(pshape, [_estrides(bt)[ng + 1:], _estrides(ot)[ng + 1:]])
    tmp_out = None
    if len(gs) > 2 or len(ps) > 1:
        # Lanes that two group strides and one lane stride cannot describe: work on
        # contiguous copies (rare: e.g. a shared along two non-adjacent axes).
        bt = cupy.ascontiguousarray(bt).reshape(G, T, P)
        at = cupy.ascontiguousarray(at).reshape(G, T)
        tmp_out = cupy.empty((G, T, P), dtype=p.out_dtype)
        ot_work = tmp_out
        gs, b_g, o_g, a_g = [G], [T * P], [T * P], [T]
        ps, b_p, o_p = [P], [1], [1]
        sbt, sot, sat = P, P, 1
    else:
        ot_work = ot
        sbt, sot, sat = _estrides(bt)[ng], _estrides(ot)[ng], _estrides(at)[ng]
        if not ps:
            ps, b_p, o_p = [1], [0], [0]
    while len(gs) < 2:  # pad to exactly two group axes
        gs, b_g, o_g, a_g = [1] + gs, [0] + b_g, [0] + o_g, [0] + a_g

    init = None
    if p.initial is not None:
        ini = p.initial.transpose(keep + groups + shared)[(0,) * len(keep)]
        init = cupy.ascontiguousarray(ini.astype(acc, copy=False)).reshape(G * P)

    if prefetch is None:
        prefetch = TUNING["matmulscan_prefetch_half"] if acc.name != out_name else True
    W = min(8, -(-P // 8))
    ncb = -(-P // (8 * W))
    nblocks = G * ncb
    kern = _kernel(radix, tb, ta)
    i64 = np.int64
    dummy = init if init is not None else cupy.empty(1, dtype=acc)
    args = (
        bt, ot_work, at, dummy, np.int32(init is not None),
        i64(T), i64(P), i64(gs[1]), i64(ncb), np.int32(abs(sbt) == 1), np.int32(prefetch),
        i64(b_g[0]), i64(b_g[1]), i64(sbt), i64(b_p[0]),
        i64(o_g[0]), i64(o_g[1]), i64(sot), i64(o_p[0]),
        i64(a_g[0]), i64(a_g[1]), i64(sat),
    )
    if nblocks:
        _launch(kern, nblocks, 32 * W, args)
    if tmp_out is not None:
        ot[...] = tmp_out.reshape(ot.shape)


def _launch(kern, nblocks, nthreads, args):
    # CuPy passes ndarrays as pointers to their first element, which for views with
    # negative strides (reverse=True) is the element at index 0: what the kernel wants.
    kern((nblocks,), (nthreads,), args)
