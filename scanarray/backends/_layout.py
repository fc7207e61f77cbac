"""Stride arithmetic shared by every backend (reads shapes and strides only; imports no library).

One copy of each helper: the NumPy, numba, CuPy and Dask drivers and :mod:`scanarray._dense`
all view their operands through these.
"""

from __future__ import annotations

__all__ = ["compact", "element_strides", "lanes_contiguous", "merge_axes"]


def compact(x):
    """The smallest view of a broadcast array: stride-0 axes cut to length 1.

    A scalar or per-lane ``a`` broadcast to the full shape then costs its own size, not the
    result's: a time-invariant dense ``A`` has a time axis of length 1, and a cast of it
    (float16 storage, integer inputs) touches one copy.
    """
    return x[tuple(slice(0, 1) if (s == 0 and n > 1) else slice(None) for s, n in zip(x.strides, x.shape))]


def element_strides(x):
    """Strides of ``x`` in elements rather than bytes (kernels index typed pointers)."""
    return [s // x.itemsize for s in x.strides]


def lanes_contiguous(x) -> bool:
    """Whether some lane axis of ``x (*lanes, T)`` has a smaller stride than time (time-major data)."""
    lane = [abs(s) for s, n in zip(x.strides[:-1], x.shape[:-1]) if n > 1]
    return bool(lane) and min(lane) < abs(x.strides[-1])


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
