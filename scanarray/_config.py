"""The NumPy backend's dense ``method="auto"`` rule (the CuPy backend's tunables and rules are in
``scanarray/backends/cupy``)."""

from __future__ import annotations

__all__ = ["numpy_dense_auto_method"]


#: Dense NumPy choice (issue 6), from benchmarks/bench_dense.py --cpu-sweep and --cpu on a 2-core
#: AMD EPYC VM (NumPy 2.4.6, OpenBLAS 0.3.31), 2026-11-21 08:24-08:27 UTC, best of 5-15 calls
#: (docs/guide/dense.md), shared A (--cpu-a shared)
#: at 08:37-08:39 UTC. Per time step, a NumPy method costs about
#:   sequential:                 NUMPY_STEP_US + lanes * mv(n)                    (a matmul + an add)
#:   cyclic_reduction / chunked: a_lanes * mm(n) + NUMPY_PAR_MV * lanes * mv(n)   (few, long calls)
#: with mv(n), mm(n) the cost of one n x n matvec / product inside a batched matmul (NumPy calls
#: BLAS once per matrix): mv(n) = 0.05 + n^2 / 2800 us, mm(n) = 0.1 + n^3 / 37000 us (float32;
#: times 2 float64, 4 complex64, 8 complex128); the parallel methods' two matvecs per (lane, step)
#: cost less than two of the loop's (long calls): NUMPY_PAR_MV = 1.6. ``a_lanes`` counts A's
#: distinct transitions: an A shared by the lanes pays its products once. Shared A (T, n, n),
#: b (B, T, n), T = 4096, float32: (8, 16) chunked 6.61 ms, CR 6.96, sequential 9.15 (float64:
#: chunked 8.93, sequential 10.39, which the rule picks); (64, 16) sequential 35.4, chunked 47.1;
#: (8, 4) CR 2.68, chunked 2.93, sequential 7.08; (8, 64) sequential 20.8, chunked 50.4.
#: Measured float32, time-varying A, per step:
#: sequential 1.45 us (B = 1, n = 4), 2.2 us (B = 8, n = 16), 12.9 us (B = 64, n = 16), 13.2 us
#: (B = 8, n = 64); chunked 0.38 us (B = 1, n = 16), 3.2 us (B = 8, n = 16), 7.7 us (B = 1,
#: n = 64). So the matrix products pay off for few lanes and small n: (1, 4096, 16) CR 1.30 ms,
#: chunked 1.55, sequential 6.28; (8, 4096, 4) CR 3.58, sequential 7.11; but (8, 4096, 16)
#: sequential 9.12, chunked 13.02, CR 17.68, per-step loop 15.27; (64, 4096, 16) sequential
#: 52.75, chunked 138.7; (1, 4096, 64) sequential 11.72, chunked 31.70.
NUMPY_STEP_US = 1.2
NUMPY_PAR_MV = 1.6
#: Between the two parallel methods: cyclic reduction issues few, long calls (a few per level)
#: and wins while its work arrays stay in cache; chunked keeps its per-step arrays small.
#: Measured: n = 4, T = 4096, B = 1 / 8: CR 0.58 / 3.58 ms, chunked 0.86 / 4.35; n = 16, B = 1,
#: T = 1024 / 4096 / 16384: CR 0.41 / 1.30 / 6.61, chunked 0.52 / 1.55 / 5.36. Cyclic reduction
#: when n <= 4, or when A is not shared across lanes and its elements take at most this many
#: bytes (with a shared A at (8, 4096, 16) it took 6.96 ms against chunked's 6.61 in the run
#: above, 9.43 against 5.74 in an earlier one, 08:33 UTC).
NUMPY_CR_MAX_BYTES = 8 * 2**20
_NUMPY_MAC_FACTOR = {"f": 1, "c": 4}


def numpy_dense_auto_method(problem):
    """The NumPy dense method for ``method="auto"`` (see ``NUMPY_STEP_US``).

    A time-invariant ``A`` takes ``chunked``: its matvecs are GEMMs ``h @ A^T`` and it forms only
    ``A^L``; (8, 4096, 16) float32: 1.77 ms against the per-step loop's 12.8 and sequential's 8.1.
    Cyclic reduction was a little faster at its best in a fresh process (1.6-1.9 ms; 0.36 against
    0.67 at B = 1; 16 against 25 at B = 64), but its long GEMMs are the ones OpenBLAS splits over
    threads: with one competing process on this 2-core VM its float64 median rose to 2.6x its best
    (chunked: 1.05x); and inside the benchmark process, after the other rows, its float64 took
    58-60 ms in three runs (chunked 2.7-2.9; cause not identified).
    """
    T, n = problem.length, problem.b.shape[-1]
    if T <= 2:
        return "sequential"
    a = problem.a
    a_lanes = lanes = 1
    for size, step in zip(a.shape[:-3], a.strides[:-3]):
        a_lanes *= size if step != 0 else 1
    for size in problem.lanes:
        lanes *= size
    if a.strides[-3] == 0:
        return "chunked"
    dt = problem.dtype
    k = _NUMPY_MAC_FACTOR.get(dt.kind, 1) * max(1, dt.itemsize // (8 if dt.kind == "c" else 4))
    mv = 0.05 + k * n * n / 2800
    mm = 0.1 + k * n**3 / 37000
    if a_lanes * mm + NUMPY_PAR_MV * lanes * mv >= NUMPY_STEP_US + lanes * mv:
        return "sequential"
    if n <= 4 or (a_lanes == lanes and a_lanes * T * n * n * dt.itemsize <= NUMPY_CR_MAX_BYTES):
        return "cyclic_reduction"
    return "chunked"
