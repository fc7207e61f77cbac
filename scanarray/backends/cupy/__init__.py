"""The CuPy backend: CUDA kernels on CuPy arrays, on the inputs' device and CuPy's current stream.

Each method lives in its own module, imported when first used (none imports CuPy at import):

- ``lookback``, ``sequential``: :mod:`.scan` (single-pass scan with decoupled look-back,
  Merrill & Garland 2016; one thread per lane);
- ``matmulscan``: :mod:`.matmulscan` (tensor-core MatMulScan, Zouzias & McColl, arXiv 2411.17887);
- dense methods: :mod:`.dense` (cyclic reduction and prefix on ``cupy.matmul``, and CUDA kernels).

``method="auto"`` follows the rules below, whose constants are in :mod:`.tuning`
(docs/guide/gpu.md and docs/guide/dense.md give the measurements).
"""

from __future__ import annotations

from .tuning import TUNING

__all__ = ["adjoint", "auto_method", "linear_recurrence"]


def auto_method(problem, tuning=TUNING):
    """The method ``method="auto"`` runs: for the diagonal form ``sequential`` (one thread per
    lane) where rows are very short or where many short lanes lie closer in memory than time
    steps, else ``lookback``; for the dense form see :func:`_dense_auto`."""
    if problem.dense:
        return _dense_auto(problem, tuning)
    b = problem.b
    T = b.shape[-1]
    if T <= tuning["seq_max_t_rows"]:
        return "sequential"
    if T <= tuning["seq_max_t"]:
        lanes = [(n, abs(st)) for n, st in zip(b.shape[:-1], b.strides[:-1]) if n > 1]
        nlanes = 1
        for n, _ in lanes:
            nlanes *= n
        if lanes and nlanes >= tuning["seq_min_lanes"] and min(st for _, st in lanes) < abs(b.strides[-1]):
            return "sequential"
    return "lookback"


def _dense_auto(problem, t):
    """The dense method with the least estimated time: ``sequential`` costs a fixed time plus T
    latency-bound steps; ``chunked`` (``lookback`` for small n) about 2 sqrt(T) such steps plus its
    products at a measured rate, where it was measured; with one lane ``prefix`` while its
    T n^3 log2 T work is small, else ``cyclic_reduction``, whose time grows with lanes x T."""
    T, n = problem.length, problem.b.shape[-1]
    lanes = 1
    for s in problem.lanes:
        lanes *= s
    step_us = t["dense_step_us"]
    bucket = next((k for k in sorted(step_us) if n <= k), None)
    if bucket is not None:
        seq_ms = t["dense_fixed_ms"] + T * step_us[bucket] / 1e3
        alt_ms = t["dense_one_lane_ms"] if lanes == 1 else \
            max(t["dense_cr_floor_ms"], lanes * T * t["dense_cr_ns"][bucket] / 1e6)
        lo, hi = t["dense_chunk_n"]
        if lo <= n <= hi and lanes >= t["dense_chunk_min_lanes"] and T >= t["dense_chunk_min_t"]:
            mma = problem.dtype == "float32"
            rate = t["dense_chunk_mma_per_ms" if mma else "dense_chunk_fma_per_ms"][bucket]
            m = bucket if mma and bucket in t["dense_chunk_mma_padded"] else n
            chunk_ms = t["dense_fixed_ms"] + 2 * T**0.5 * step_us[bucket] / 1e3 + lanes * T * m**3 / rate
            if chunk_ms < seq_ms and chunk_ms <= alt_ms:
                return "lookback" if n <= t["dense_lookback_max_n"] else "chunked"
        if seq_ms <= alt_ms:
            return "sequential"
    if lanes == 1 and T * n**3 * max(1, T.bit_length() - 1) <= t["dense_prefix_max_work"]:
        return "prefix"
    return "cyclic_reduction"


def linear_recurrence(problem):
    """Compute ``problem`` into ``problem.out``; with ``Problem.mul`` set also ``mul_out = h * mul``,
    and with ``Problem.scale`` ``scale * h`` in place of ``h``: in the scan's own pass where the
    diagonal kernels take the layout, else right after it."""
    if not problem.dense and problem.method != "matmulscan":
        from . import scan

        return scan.linear_recurrence(problem)
    mul, mul_out = problem.mul, problem.mul_out
    problem.mul = problem.mul_out = None
    if problem.dense:
        from . import dense

        dense.linear_recurrence(problem)
    else:
        from . import matmulscan

        matmulscan.linear_recurrence(problem)
    if mul is not None and mul_out is not None:
        import cupy

        cupy.multiply(problem.out, mul, out=mul_out)
    if problem.scale is not None:
        problem.out *= problem.scale
    problem.mul, problem.mul_out = mul, mul_out
    return problem.out


def adjoint(a, g, lam, h, ga, reverse, method="auto"):
    """The adjoint's scan in one launch (``BackendSpec.shifted_adjoint``; :func:`.scan.adjoint`):
    its launch on raw pointers if launched, False where the caller must scan views."""
    from . import scan

    return scan.adjoint(a, g, lam, h, ga, reverse, method)
