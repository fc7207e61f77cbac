"""Stride arithmetic shared by the kernel drivers (NumPy only; no GPU imports)."""

from __future__ import annotations

__all__ = ["element_strides", "merge_axes"]


def element_strides(x):
    """Strides of ``x`` in elements rather than bytes (kernels index typed pointers)."""
    return [s // x.itemsize for s in x.strides]


def merge_axes(shape, strides_list, drop_ones=False):
    """Merge adjacent axes that every array steps over as one axis.

    Axes ``i`` and ``i + 1`` merge when ``stride[i] == stride[i+1] * shape[i+1]``
    in every array of ``strides_list`` (stride-0 broadcast pairs included), so a
    kernel sees as few lane dimensions as the layouts allow. With ``drop_ones``,
    length-1 axes (whose strides mean nothing) are dropped first. Returns the new
    ``(shape, strides_list)`` as lists.
    """
    keep = [i for i, n in enumerate(shape) if n != 1] if drop_ones else range(len(shape))
    shape = [shape[i] for i in keep]
    strides_list = [[st[i] for i in keep] for st in strides_list]
    i = 0
    while i < len(shape) - 1:
        if all(st[i] == st[i + 1] * shape[i + 1] for st in strides_list):
            shape[i] *= shape[i + 1]
            for st in strides_list:
                st[i] = st[i + 1]
                del st[i + 1]
            del shape[i + 1]
        else:
            i += 1
    return shape, strides_list
