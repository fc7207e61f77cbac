"""The workloads of the backend issues, in one place (the suite and the plot script read them).

Shapes are labels: ``"64x65536"`` scans the last axis, ``"16384x256@0"``
scans axis 0 (time-major). ``*_FULL`` are the issues' own sizes, run with
``SCANARRAY_ASV_FULL=1``; the defaults keep a run over several commits short.
"""

from __future__ import annotations

from ._common import FULL, SMOKE


def _smoke(small, smoke):
    """``smoke`` under SCANARRAY_ASV_SMOKE=1 (CI's quick run, results not kept), else ``small``."""
    return smoke if SMOKE and not FULL else small


# ----------------------------------------------------------------------- CPU
#: backend/method pairs on NumPy arrays (a pair a commit lacks is skipped)
CPU_IMPLS = _smoke(["numpy/chunked", "numba/auto", "numba/chunked", "numba/sequential"],
                   ["numpy/chunked", "numba/auto"])
#: peers for a constant coefficient (EMA)
CPU_EMA_PEERS = ["scipy.lfilter", "pandas.ewm"]
# The numba issue: (1024, 65536) f64; one row of 2**24; time-major (65536, 1024) along axis 0.
CPU_SHAPES = _smoke(["64x65536", "1x4194304", "16384x256@0"], ["8x4096", "1x65536", "1024x64@0"])
CPU_SHAPES_FULL = ["1024x65536", "1x16777216", "65536x1024@0"]
#: EMA: scalar a over 2**24 float64 (the numba issue's workload 4)
CPU_EMA_N = _smoke(2**24, 2**16)
CPU_SWEEP = _smoke([2**14, 2**16, 2**18, 2**20, 2**22], [2**12, 2**16])
CPU_SWEEP_FULL = [2**14, 2**16, 2**18, 2**20, 2**22, 2**24, 2**26]
CPU_COPY_BYTES = _smoke(128 * 2**20, 16 * 2**20)
CPU_COPY_BYTES_FULL = 512 * 2**20
CPU_DENSE_IMPLS = _smoke(["numpy/cyclic_reduction", "numpy/prefix", "numba/cyclic_reduction", "numba/sequential"],
                         ["numpy/cyclic_reduction", "numba/cyclic_reduction"])
CPU_DENSE_BATCH = 1
CPU_DENSE_T = 4096 if FULL else _smoke(1024, 128)

# ----------------------------------------------------------------------- GPU
#: backend/method pairs on CuPy arrays
GPU_IMPLS = ["cupy/auto", "cupy/lookback", "cupy/matmulscan", "cupy/sequential", "numba_cuda/blelloch"]
# The look-back issue's shapes; the defaults are the first three classes of it.
GPU_SHAPES = ["8x1024x4096", "1x1x16777216", "16384x1024@0"]
GPU_SHAPES_FULL = ["2x256x4096", "2x256x65536", "8x1024x4096", "16x2048x4096", "4x64x262144",
                   "1x1x16777216", "1x1x268435456", "65536x4096@0"]
#: rows of T steps over 2**24 elements in every dtype (1001: no multiple of a 16-byte group)
GPU_ROW_N = 2**24
GPU_ROW_T = [16, 300, 1001]
GPU_ROW_T_FULL = [16, 64, 256, 300, 1000, 1001, 4096, 16384]
#: EMA: scalar a over 1e8 float64
GPU_EMA_N = 10**8
GPU_EMA_PEERS = ["cupyx.lfilter", "jax.associative_scan"]
GPU_SWEEP_PEERS = ["jax.associative_scan", "fpscan", "accelerated_scan"]
#: sweep: float32 rows of 4096 steps (the length every peer takes), full-size a
GPU_SWEEP_T = 4096
GPU_SWEEP = [2**20, 2**22, 2**24, 2**26, 2**28]
GPU_SWEEP_FULL = GPU_SWEEP
GPU_COPY_BYTES = 2**30
#: inter-chunk state scan (BH, G, 16, 64) along G with a (BH, G, 16, 1) decay
CHUNK_BH = [1, 512]
CHUNK_G = [128, 256]
GPU_DENSE_IMPLS = ["cupy/cyclic_reduction", "cupy/prefix", "cupy/sequential", "cupy/chunked", "cupy/lookback",
                   "jax.associative_scan"]
#: the dense issue's target shapes, "batch x T x n" (float32)
GPU_DENSE_TARGETS = ["64x1024x16", "8x4096x64"]
GPU_DENSE_BATCH = 8
GPU_DENSE_T = 4096

# ---------------------------------------------------------------- shared
#: GAE: time-major (T=256, 16384 environments) float32, reverse, along axis 0
GAE_SHAPE = _smoke((256, 16384), (256, 1024))
DENSE_N = [4, 16, 64]
CPU_DENSE_N = _smoke(DENSE_N, [4, 16])


def pick_dtypes(small, full):
    return full if FULL else small
