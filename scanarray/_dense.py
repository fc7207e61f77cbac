"""Dense recurrences ``h[t] = A[t] @ h[t-1] + b[t]`` written once against an array namespace.

The functions take the native module ``xp`` (NumPy or CuPy) and canonical
views: ``A (..., T, n, n)`` and ``b (..., T, n)``, possibly broadcast (stride 0),
and return a new array ``h (..., T, n)`` of the accumulation dtype. Each level
of work is one batched ``xp.matmul``, so the same code runs on the CPU and on
the GPU.
"""

from __future__ import annotations

__all__ = ["METHODS", "compact", "cyclic_reduction", "prefix"]


def compact(x):
    """The smallest view of a broadcast array: stride-0 axes cut to length 1.

    A time-invariant transition ``A`` then has a time axis of length 1, and the
    algorithms below multiply it once per level instead of ``T`` times.
    """
    return x[tuple(slice(0, 1) if (s == 0 and n > 1) else slice(None) for s, n in zip(x.strides, x.shape))]


def _matvec(xp, A, v):
    return xp.matmul(A, v[..., None])[..., 0]


def _prepare(xp, A, b, h0, dt, reverse):
    """Cast (without expanding broadcast axes), flip views for ``reverse``, fold ``h0`` into ``b[0]``."""
    A = compact(A)
    if reverse:
        A = A[..., ::-1, :, :]
        b = b[..., ::-1, :]
    A = A.astype(dt, copy=False)
    B = b.astype(dt, copy=True)  # owned: the algorithms work in place in it
    if h0 is not None:
        # h[0] = A[0] h0 + b[0]: the recurrence from a zero state on the corrected b.
        B[..., 0, :] += _matvec(xp, A[..., 0, :, :], h0.astype(dt, copy=False))
    return A, B


def _finish(h, reverse):
    return h[..., ::-1, :] if reverse else h


def _pairs(A, m):
    """(A[0:2m:2], A[1:2m:2]); a time-invariant A (time length 1) stays itself."""
    if A.shape[-3] == 1:
        return A, A
    return A[..., 0:2 * m:2, :, :], A[..., 1:2 * m:2, :, :]


def _cr(xp, A, B):
    """Cyclic reduction in place in ``B`` (Hockney 1965; Heller 1976).

    Eliminate every even state: for pairs (2j, 2j+1) the combined step is
    ``(A[2j+1] A[2j], A[2j+1] b[2j] + b[2j+1])``; recurse on the ``T // 2`` odd
    states, then recover the even ones with one batched matvec. Work
    ``~ T n^3`` multiply-adds for the products and ``~ 2 T n^2`` for the vectors,
    against ``T n^3 log2 T`` for a prefix scan.
    """
    T = B.shape[-2]
    if T == 1:
        return B
    m = T // 2
    A_even, A_odd = _pairs(A, m)
    A2 = xp.matmul(A_odd, A_even)
    B2 = _matvec(xp, A_odd, B[..., 0:2 * m:2, :])
    B2 += B[..., 1:2 * m:2, :]
    H_odd = _cr(xp, A2, B2)
    B[..., 1:2 * m:2, :] = H_odd
    if T > 2:
        # h[2j] = A[2j] h[2j-1] + b[2j] for j >= 1 (h[0] = b[0] already).
        A_rest = A if A.shape[-3] == 1 else A[..., 2::2, :, :]
        k = (T - 1) // 2
        B[..., 2::2, :] += _matvec(xp, A_rest, H_odd[..., :k, :])
    return B


def cyclic_reduction(xp, A, b, h0, dt, reverse=False):
    """Dense scan by cyclic reduction: one batched matmul per halving level."""
    A, B = _prepare(xp, A, b, h0, dt, reverse)
    return _finish(_cr(xp, A, B), reverse)


def prefix(xp, A, b, h0, dt, reverse=False):
    """Dense scan by a Hillis-Steele prefix of (A, b) pairs: ``T n^3 log2 T`` work.

    The baseline cyclic reduction must beat; kept because its ``log2 T``
    levels are each one large batched matmul with no back-substitution.
    """
    A, B = _prepare(xp, A, b, h0, dt, reverse)
    T = B.shape[-2]
    if A.shape[-3] == 1 and T > 1:
        A = xp.broadcast_to(A, A.shape[:-3] + (T,) + A.shape[-2:])
    A = A.copy()
    d = 1
    while d < T:
        # (A, b)[t] <- (A, b)[t] o (A, b)[t-d]: right-hand sides read the old values.
        B_new = _matvec(xp, A[..., d:, :, :], B[..., :-d, :])
        A_new = xp.matmul(A[..., d:, :, :], A[..., :-d, :, :])
        B[..., d:, :] += B_new
        A[..., d:, :, :] = A_new
        d *= 2
    return _finish(B, reverse)


METHODS = {"cyclic_reduction": cyclic_reduction, "prefix": prefix}
