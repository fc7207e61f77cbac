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
import functools
import math
import os

import numpy as np

from .._layout import element_strides as _estrides, merge_axes as _merge

__all__ = ["linear_recurrence", "unsupported_reason", "RADIX"]

#: default radix s of the MatMulScan groups inside a 16-step tensor-core tile (4, 8 or 16).
#: s = 16 was fastest or tied in every row of benchmarks/bench_matmulscan.py on an H200
#: (2026-11-21, docs/matmulscan.md; e.g. float16 b (512, 256, 16, 64): 1015 us against 1057
#: for s = 4), with float32 errors of 2.4e-7 against 1.5e-7 for s = 4.
RADIX = 16

#: load the next 16-step chunk of b into registers while the current one is computed:
#: None picks by dtype; it paid for float32 (b (512, 256, 16, 64): 862 us against 937 without)
#: and cost for float16/bfloat16 (1057 against 977; H200, 2026-11-21, docs/matmulscan.md).
PREFETCH = None
_PREFETCH_BY_DTYPE = {"float16": False, "bfloat16": False}
#: "warp": every warp builds its decay fragments in registers from shuffled coefficients and
#: never waits for its block; "block": the block builds one shared decay matrix per chunk
#: behind a barrier. Both are tested; docs/matmulscan.md has the measurements.
KERNEL = "warp"

_CTYPE = {"float32": "float", "float64": "double", "float16": "sa_half", "bfloat16": "sa_bf16"}
_ACC = {"float32": "float32", "float64": "float64", "float16": "float32", "bfloat16": "float32"}


def _source() -> str:
    path = os.path.join(os.path.dirname(__file__), "cuda", "matmulscan.cu")
    with open(path) as f:
        return f.read()


@functools.lru_cache(maxsize=None)
def _kernel(device: int, radix: int, tb: str, ta: str, variant: str = "warp"):
    """Compile (once per device and instantiation) and return the RawKernel."""
    import cupy

    if variant not in ("warp", "block"):
        raise ValueError(f"KERNEL must be 'warp' or 'block'; got {variant!r}")
    kname = "matmulscan_warp_kernel" if variant == "warp" else "matmulscan_kernel"
    name = f"{kname}<{radix}, {tb}, {ta}>"
    # Header-free source (inline PTX mma.sync), so NVRTC's missing crt/mma.h on some
    # CUDA installs does not matter here.
    mod = cupy.RawModule(code=_source(), options=("-std=c++17",), name_expressions=[name])
    return mod.get_function(name)


def _device_ok():
    import cupy

    dev = cupy.cuda.Device()
    return dev.id, int(dev.compute_capability) >= 80


def unsupported_reason(p) -> str | None:
    """Why the tensor-core path cannot take problem ``p`` (``None`` when it can)."""
    if p.dense:
        return "dense=True (use cyclic_reduction)"
    if np.dtype(p.out_dtype).name not in _CTYPE:
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


def linear_recurrence(p, radix=None, strict=False):
    """Scan problem ``p`` (diagonal form) with tensor-core MatMulScan; write ``p.out``.

    Parameters
    ----------
    p : scanarray._problem.Problem
        Canonical problem on CuPy arrays (time axis last).
    radix : {4, 8, 16}, optional
        Size ``s`` of the radix-s groups batched into one 16 x 16 tensor-core
        operand. Default :data:`RADIX`.
    strict : bool, optional
        Raise ``ValueError`` for problems the tensor-core path cannot take
        instead of running them with the look-back method.
    """
    reason = unsupported_reason(p)
    if reason is not None:
        if strict:
            raise ValueError(f"method='matmulscan' cannot take this problem: {reason}")
        try:
            from . import scan as _cupy_scan
        except ImportError:
            raise ValueError(
                f"method='matmulscan' cannot take this problem ({reason}) and the look-back "
                "method it falls back to is not built in this version"
            ) from None
        return _cupy_scan.linear_recurrence(dataclasses.replace(p, method="lookback"))
    radix = RADIX if radix is None else int(radix)
    if radix not in (4, 8, 16):
        raise ValueError(f"radix must be 4, 8 or 16; got {radix}")
    _run(p, radix)
    return p.out


def _run(p, radix):
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
    acc = np.dtype(_ACC[out_name])

    def view(x):  # (groups..., T, shared...), no copy
        return x.transpose(perm)[(0,) * len(keep)]

    bt, ot = view(b), view(out)
    at = view(a)[(Ellipsis,) + (0,) * len(shared)]  # (groups..., T)

    if np.dtype(b.dtype) != np.dtype(p.out_dtype):
        bt = bt.astype(p.out_dtype)  # a cast copy, contiguous in this order
    tb = _CTYPE[out_name]
    a_name = np.dtype(a.dtype).name
    if a_name == out_name:
        ta = tb
    elif a_name == acc.name:
        ta = _CTYPE[a_name]
    else:
        at = at.astype(acc)
        ta = _CTYPE[acc.name]

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

    prefetch = _PREFETCH_BY_DTYPE.get(out_name, True) if PREFETCH is None else bool(PREFETCH)
    W = min(8, -(-P // 8))
    ncb = -(-P // (8 * W))
    nblocks = G * ncb
    dev, _ = _device_ok()
    kern = _kernel(dev, radix, tb, ta, KERNEL)
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
