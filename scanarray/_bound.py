"""Repeated calls of one signature, bound to the work planned for them.

A backend sets ``Problem.bind``: a callable that binds the caller's arrays to a direct repeat of
its work (the CuPy backend's launches, ``backends/cupy/_common.Binder``; the numba backend's
sequential loop, ``numba_backend._bind``). The public function keeps those per signature of a
call, everything validation, dtype rules and planning read from the arguments except the data
pointers, and sends a repeated call straight to them: about 7 µs of host time per call instead of
about 40 on the H200 host measured (docs/guide/gpu.md), and on NumPy arrays about 7 µs instead of
28 on a 2-core VM. It looks up the calls of backends with ``BackendSpec.fast_call`` (CuPy,
numba); the torch front-end keeps its CPU calls' bound loops too (NumPy views of tensors). The
bound call itself checks what the signature does not fix (devices, pointer alignment, overlaps,
the numba backend's threads and tunables) and returns None to send the call through the full path.
"""

from __future__ import annotations

import math

__all__ = ["BoundCalls", "CALLS"]


class BoundCalls:
    """Signature -> bound call. ``enabled`` False sends every call through the full path (for
    benchmarks that time it)."""

    def __init__(self):
        self.table: dict = {}
        self.enabled = True

    def call(self, a, b, axis, chunk, initial, reverse, dense, dtype, out, backend, method, run=True, scale=None):
        """``(result, key)``: the bound call's result, or None and the key to :meth:`store` the
        bound call the full path makes under (None where calls of this signature are not bound).
        ``run=False``: the bound call itself instead of its result (the torch front-end feeds it
        device pointers). ``scale``: the vocabulary's factor on the result (a Python float,
        :func:`scanarray._vocab.scan`), keyed by value and the sign of a zero.

        The key is everything validation, dtype rules and planning read from the arguments,
        except the data pointers. The type of ``b`` is part of it (one table serves every array
        library), and so are the types of the scalar arguments: ``dense=0`` must still fail where
        ``False`` passed. A Python scalar ``a`` is keyed by value (and the sign of a zero).
        (Spelled out here, not in helpers: this runs on every call.)
        """
        if not self.enabled:
            return None, None
        tb, ta = type(b), type(a)
        if ta is tb:
            sa = (a.shape, a.strides, a.dtype)
        elif ta is float:
            sa = (a, math.copysign(1.0, a))
        elif ta is int:
            sa = a
        else:
            return None, None
        so, sh = _array_sig(out, tb), _array_sig(initial, tb)
        if so is False or sh is False:
            return None, None
        key = (ta, sa, tb, b.shape, b.strides, b.dtype, so, sh, type(axis), axis, type(chunk), chunk, type(reverse),
               reverse, type(dense), dense, dtype, backend, method,
               None if scale is None else (scale, math.copysign(1.0, scale)))
        try:
            fast = self.table.get(key)
        except TypeError:  # an unhashable argument (a list for axis, say): no binding
            return None, None
        if fast is None or not run:
            return fast, key
        return fast(a, b, initial, out), key

    def store(self, key, fast):
        if fast is not None:
            if len(self.table) >= 1024:
                self.table.clear()
            self.table[key] = fast


#: the bound calls of every backend that binds (one table: the key holds the array types)
CALLS = BoundCalls()


def _array_sig(x, tb):
    """``x``'s part of a signature: None for None, layout and dtype for an array of type ``tb``,
    False for anything else (not bound)."""
    if x is None:
        return None
    if type(x) is tb:
        return (x.shape, x.strides, x.dtype)
    return False
