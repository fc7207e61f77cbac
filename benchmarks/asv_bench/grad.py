"""The backward pass: ``linear_recurrence_vjp`` (the gradients of ``a``, ``b`` and ``initial``).

Float32 rows along the last axis, ``a`` in [0.9, 1). ``impl`` is ``"vjp"`` (the backward alone,
given ``h`` and the incoming gradient), ``"forward"`` (the scan it differentiates, for the ratio
the issue tracks) or ``"copy"`` (the device's copy of as many bytes as the backward must move:
read ``a``, ``h`` and the gradient, write two gradients). A commit without
``linear_recurrence_vjp`` is skipped. ``SCANARRAY_ASV_FULL=1`` gives the larger shapes.
"""

from __future__ import annotations

import numpy as np

from . import _common as C
from .helpers import _Helper


def _vjp():
    try:
        from scanarray import linear_recurrence_vjp
    except ImportError as exc:
        raise NotImplementedError(f"no linear_recurrence_vjp in this commit: {exc}") from exc
    return linear_recurrence_vjp


class _Backward(_Helper):
    params = [["vjp", "forward", "copy"]]
    param_names = ["impl", "shape"]

    def build(self, impl, shape):
        vjp = _vjp()
        import scanarray

        xp = C.require_gpu() if self.device == "gpu" else np
        shp = tuple(int(s) for s in shape.split("x"))
        rng = np.random.default_rng(5)
        a = xp.asarray((0.9 + 0.1 * rng.random(shp)).astype(np.float32))
        b = xp.asarray(rng.standard_normal(shp).astype(np.float32))
        g = xp.asarray(rng.standard_normal(shp).astype(np.float32))
        h = scanarray.linear_recurrence(a, b)
        self.nbytes = 5 * b.nbytes  # a, h, g read; grad_a, grad_b written
        if impl == "copy":
            src, dst = xp.stack([a, h, g]), xp.empty((2,) + shp, np.float32)
            return lambda: (xp.copyto(dst, src[:2]), xp.copyto(dst[:1], src[2:]))
        if impl == "forward":
            out = xp.empty_like(b)
            self.nbytes = 3 * b.nbytes
            return lambda: scanarray.linear_recurrence(a, b, out=out)
        return lambda: vjp(a, h, g)

    def track_gbps(self, impl, shape):
        return self.nbytes / C.best_seconds(lambda: (self.fn(), self.sync())) / 1e9

    track_gbps.unit = C.GBPS


class CpuBackward(_Backward):
    """The backward pass on NumPy arrays (the numba backend where installed)."""

    params = _Backward.params + [C.pick(["64x16384"], ["256x65536", "1x16777216"])]


class GpuBackward(_Backward):
    """The backward pass on CuPy arrays: the fused reverse scan and product of issue 40."""

    device = "gpu"
    params = _Backward.params + [C.pick(["2x256x4096", "16x2048x4096", "1x1x16777216"],
                                        ["2x256x4096", "16x2048x4096", "2x256x65536", "1x1x268435456"])]
