"""The CuPy backend's tunables: tile shapes and the constants of ``method="auto"``, one entry a line.

Each entry names what was measured, on an NVIDIA H200 (CuPy 14, CUDA 13) unless it says otherwise;
the figures are in docs/guide/gpu.md (diagonal) and docs/guide/dense.md (dense). Shapes keyed by an
itemsize (4, 8, 16) are per compute dtype; ``None`` switches a kernel off for that itemsize. The
planners take this table as their ``tuning`` keyword, so a test or benchmark passes its own.
"""

from __future__ import annotations

__all__ = ["TUNING"]

TUNING = {
    # ---- diagonal kernels (cuda/scan.cu): (threads, steps per thread, min blocks per SM)
    "rows": {4: (256, 16, 4), 8: (128, 8, 6), 16: (128, 4, 5)},  # rows of one tile; kernel sweep, % of the copy
    "rows_long": {4: (256, 16, 4), 8: (256, 8, 2), 16: (256, 4, 2)},  # rows of several tiles held in registers
    "rows_staged": {4: (128, 32, 6), 8: (128, 16, 6), 16: None},  # the same staged in shared memory (cc >= 9.0); one row of 2**28
    "rows_warp": {4: (128, 16, 6), 8: (128, 4, 6), 16: (128, 2, 6)},  # a warp a row shorter than a tile; rows of 128-2048 steps
    "rows_block": {4: (128, 16, 3), 8: (128, 8, 4), 16: (128, 4, 4)},  # a block a row, next tile's loads in flight; (2,256,65536)
    "rows_wide": {4: (1024, 2)},  # (threads, min blocks) of rows_block on aligned vectors; fpscan's shapes; wider types spill
    "rows_block_fill": 0.45,  # rows_block from this many waves of rows (SMs x its min blocks), else look-back
    "lanes": {4: (4, 16, 6), 8: (4, 8, 4), 16: (4, 4, 4)},  # time-major (warps, steps, min blocks); (65536,4096)
    "lanes_staged": {4: None, 8: (4, 16, 4), 16: None},  # time-major staged in shared memory (cc >= 9.0); float64 (65536,2048)
    "lanes_narrow": {4: (16, 4096), 8: (8, 4096), 16: (8, 4096)},  # (lanes a tile, below this many lanes); (262144,1024)
    "lanes_vec": {4: (4, 8, 4), 8: (4, 12, 3), 16: None},  # time-major, several aligned lanes a thread; (65536,4096)
    "seq_threads": 128,  # threads a block of the sequential kernel
    # ---- diagonal method="auto" (backends/cupy/__init__.py)
    "seq_max_t_rows": 3,  # rows this short run one thread a lane; 2**24 float32 elements as rows of 4-32 steps
    "seq_min_lanes": 65536,  # ... as do this many lanes laid out closer than time steps,
    "seq_max_t": 256,  # ... of at most this many steps; chunked linear RNNs' inter-chunk scan (BH, G, 16, 64)
    # ---- dense method="auto": costs in ms of one call, fitted to calls timed one at a time
    "dense_fixed_ms": 0.06,  # sequential: this plus T steps of dense_step_us[n bucket]; n = 4-128, T = 1024-65536
    "dense_step_us": {4: 0.25, 16: 0.29, 32: 0.46, 64: 0.72, 128: 3.8},  # ... whatever the lanes up to one an SM
    "dense_one_lane_ms": 0.93,  # the fastest one lane's prefix scan or cyclic reduction ever took (T = 1024)
    "dense_cr_floor_ms": 1.55,  # cyclic reduction of several lanes: at least this, or
    "dense_cr_ns": {4: 4, 16: 10, 32: 26, 64: 114, 128: 430},  # ... lanes x T of these ns; B = 16-256
    "dense_prefix_max_work": 12 * 2**29,  # one lane: prefix while T n^3 log2 T stays below; n = 32, 64
    "dense_chunk_fma_per_ms": {4: 2.8e9, 16: 2.8e9, 32: 2.8e9, 64: 9.0e9},  # chunked products, FMA; (64,1024,16), (8,4096,64)
    "dense_chunk_mma_per_ms": {4: 6.7e9, 16: 6.7e9, 32: 11.1e9, 64: 24.5e9},  # ... on tensor cores; six shapes of n 16-64
    "dense_chunk_mma_padded": (64,),  # buckets whose tensor-core products pay for the padded n
    "dense_chunk_n": (16, 64),  # chunked only where measured: n in this range,
    "dense_chunk_min_lanes": 8,  # ... at least this many lanes
    "dense_chunk_min_t": 1024,  # ... and steps
    "dense_lookback_max_n": 16,  # lookback instead of chunked up to this n; (64,1024,16)
    # ---- dense kernels (cuda/dense.cu, cuda/dense_lookback.cu)
    "dense_block_columns": 8,  # columns of a row a thread of a block-per-lane kernel (at most 64 bytes); (8,4096,64)
    "dense_rerun_stages": 2,  # chunked rerun with more lanes than SMs, float32 n > 32: steps in registers,
    "dense_rerun_row_bytes": 64,  # ... and bytes of a row a thread (3 blocks an SM instead of 1); (8,4096,64)
    "dense_chunk_factor": 1.0,  # chunked: chunks of this times sqrt(T) steps (fewest steps on the critical path)
    "dense_chunk_min": 3,  # chunked: fewer chunks than this run the sequential kernel
    "dense_lookback_max_pad": 32,  # lookback: n padded up to this (complex128: 16, its N = 32 tile spills)
    "dense_lookback_ring": (8, 4),  # lookback: steps of A in flight a group, tensor-core / FMA maps; (64,1024,16)
    # ---- the IIR cascade (cuda/iir.cu): (threads, samples a thread's chunk) per itemsize
    "iir": {4: (64, 64), 8: (256, 16)},  # (threads, samples a thread's chunk); (64, 2**20) sosfilt orders 4, 8
    # ---- the EWM mean and variance (cuda/ewm.cu)
    "ewm_mean_rows": {4: (512, 16, 3), 8: (512, 8, 2)},  # (threads, steps a thread, min blocks), steps contiguous; (64, 2**20), one row of 2**26
    "ewm_mean_lanes": {4: (16, 32, 2), 8: (16, 16, 1)},  # (warps, steps a warp, min blocks) of 32 lanes, time-major; (2**20, 64)
    "ewm_var_rows": {4: (512, 16, 2), 8: (512, 8, 1)},  # as ewm_mean_rows; (64, 2**20), one row of 2**26
    "ewm_var_lanes": {4: (16, 32, 1), 8: (8, 16, 1)},  # as ewm_mean_lanes (float64: the most warps that fit); (2**20, 64)
    "ewm_var_lanes_min": {4: 0, 8: 1 << 15},  # time-major lanes fewer than this are copied to rows first; 2**26 elements, 32 to 16384 lanes: float32 lanes kernel faster at every count (1.14 vs 2.14 ms at 64), float64 the copy (3.25 vs 7.59 ms at 64, 1.80 vs 2.22 at 16384)
    # ---- GAE (cuda/rl.cu)
    "gae_lanes": {4: (16, 8, 1, 2), 8: (16, 8, 1, 1)},  # (warps, steps a warp, lanes a thread, min blocks), time-major, lanes strided or unaligned; (2048, 32768): of 6 float32, 5 float64
    "gae_lanes_vec": {4: (16, 4, 4, 2), 8: (16, 8, 1, 1)},  # as gae_lanes, lanes contiguous and aligned (a thread's lanes one vector access); 2**26 elements, T 128 to 2**20: of 7 float32, 6 float64 (float64 2 lanes: 0.77 against 0.52 ms at T = 128)
    "gae_lanes_max_steps": {4: 1 << 15, 8: 1 << 12},  # longer time axes take the fused pass and the core's scan (a lane's chain of tiles is long): float32 0.48 against 0.54 ms at 2**15 steps, 0.97 against 0.60 at 2**20; float64 0.97 against 0.97 at 2**13
    "gae_walk": {4: (256, 16), 8: (256, 16)},  # (threads, steps loaded ahead), a thread a lane: 2**26 elements, 128 to 2048 steps, of 8 float32 (4 lanes a thread as one vector: 97% of the copy at 128 steps, 28% at 2048), 6 float64
    "gae_walk_min_lanes": {4: 1 << 15, 8: 1 << 13},  # time-major lanes from which the walk replaces the tiles: float32 0.26 against 0.37 ms at 32768 lanes, 0.76 against 0.41 at 8192; float64 0.91 against 0.96 at 8192, 3.2 against 1.0 at 2048
    # ---- matmulscan (cuda/matmulscan.cu)
    "matmulscan_radix": 16,  # MatMulScan radix inside a 16-step tile: fastest or tied in every row measured
    "matmulscan_prefetch_half": False,  # next chunk's loads in flight for float16/bfloat16 (float32: on); (512,256,16,64)
}
