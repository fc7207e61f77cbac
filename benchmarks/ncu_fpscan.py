#!/usr/bin/env python3
"""(2,256,65536) float32 by our block-per-row kernel and by fpscan's, for Nsight Compute (issue 4).

Usage on the CUDA host, after fpscan is built (tools/gpu_issue4.sh builds it):
    ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis \
        --section WarpStateStats --section Occupancy -k regex:"rows_block|scan<" python3 benchmarks/ncu_fpscan.py
Runs, in order: our planned kernel (``rows_block`` at the shipped tile shape), ours with fpscan's
geometry (a block of 1024 threads x 4 steps per row), and fpscan's ``fullscan_forward``; each once.
"""

import cupy
import fpscan
import numpy as np
import torch

from scanarray import _config
from scanarray.backends import _cupy_scan

shape = (512, 65536)
rng = np.random.default_rng(0)
a = cupy.asarray((0.9 + 0.1 * rng.random(shape)).astype(np.float32))
b = cupy.asarray(rng.standard_normal(shape, dtype=np.float32))
out = cupy.empty_like(b)
for cfg in (None, (1024, 4, 2)):
    if cfg is not None:
        _config.CUPY_SCAN["rows_block"] = {**_config.CUPY_SCAN["rows_block"], 4: cfg}
    plan = _cupy_scan.plan(a, b, out, np.dtype(np.float32), "lookback")
    plan.launch(cupy, a, b, out, None)
    cupy.cuda.Device().synchronize()
    print(plan.name, "grid", plan.grid, "threads", plan.threads, flush=True)
ext = fpscan.ops._load_extension()
ta, tb, to = (torch.from_dlpack(x) for x in (a.reshape(2, 256, 65536), b.reshape(2, 256, 65536),
                                               out.reshape(2, 256, 65536)))
ext.fullscan_forward(ta, tb, to, False)
torch.cuda.synchronize()
print("fpscan done", flush=True)
